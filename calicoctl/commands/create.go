package commands

import (
	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/libcalico/client"
)

func newCreateCommand(a *app) *cobra.Command {
	o := &writeOptions{}
	cmd := &cobra.Command{
		Use:   "create -f FILENAME",
		Short: "Create resources by filename or stdin",
		Long: `Create a set of resources by filename or stdin. JSON and YAML formats are accepted.
Creating a resource that already exists is an error unless --skip-exists is set.
All documents are decoded and validated before the first write.`,
		Example: "  calicoctl create -f ./policy.yaml\n  cat policy.json | calicoctl create -f -",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.write(cmd.Context(), o, client.OpCreate, "create", "created")
		},
	}
	o.files.register(cmd, "create")
	o.ns.register(cmd, false)
	cmd.Flags().BoolVar(&o.skipExists, "skip-exists", false, "Skip over and treat as successful any attempts to create an entry that already exists.")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}
