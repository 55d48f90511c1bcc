package commands

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newCompletionCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:       "completion bash|zsh",
		Short:     "Output a shell completion script",
		Long:      "Output the completion script for bash or zsh. For bash: source <(calicoctl completion bash)",
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"bash", "zsh"},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "bash":
				return cmd.Root().GenBashCompletionV2(a.env.Out, true)
			case "zsh":
				return cmd.Root().GenZshCompletion(a.env.Out)
			}
			return fmt.Errorf("unsupported shell %q: use bash or zsh", args[0])
		},
	}
}
