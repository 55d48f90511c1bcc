package commands

import (
	"github.com/palisade-net/palisade/libcalico/buildinfo"
	"github.com/spf13/cobra"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Display the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Print(buildinfo.Get().Lines("Client Version"))
			return nil
		},
	}
}
