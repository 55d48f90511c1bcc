package commands

import (
	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/libcalico/client"
)

func newApplyCommand(a *app) *cobra.Command {
	o := &writeOptions{}
	cmd := &cobra.Command{
		Use:   "apply -f FILENAME",
		Short: "Apply resources by filename or stdin",
		Long: `Create or replace a set of resources by filename or stdin. JSON and YAML formats are accepted.
A resource that does not exist is created; one that exists has its specification replaced entirely.
All documents are decoded and validated before the first write.`,
		Example: "  calicoctl apply -f ./policy.yaml\n  cat policy.json | calicoctl apply -f -",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.write(cmd.Context(), o, client.OpApply, "apply", "applied")
		},
	}
	o.files.register(cmd, "apply")
	o.ns.register(cmd, false)
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}
