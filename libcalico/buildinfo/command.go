package buildinfo

import "github.com/spf13/cobra"

// Command is the `version` subcommand of the binaries other than
// calicoctl (whose version also reports the cluster's): it prints Get's
// lines with "Version" first.
func Command() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Display the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Print(Get().Lines("Version"))
			return nil
		},
	}
}
