package commands

import (
	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/libcalico/client"
)

func newReplaceCommand(a *app) *cobra.Command {
	o := &writeOptions{}
	cmd := &cobra.Command{
		Use:   "replace -f FILENAME",
		Short: "Replace resources by filename or stdin",
		Long: `Replace a set of existing resources by filename or stdin. JSON and YAML formats are accepted.
Replacing a resource that does not exist is an error.
All documents are decoded and validated before the first write.`,
		Example: "  calicoctl replace -f ./policy.yaml\n  cat policy.json | calicoctl replace -f -",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.write(cmd.Context(), o, client.OpUpdate, "replace", "replaced")
		},
	}
	o.files.register(cmd, "replace")
	o.ns.register(cmd, false)
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}
