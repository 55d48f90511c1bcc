// Package agent builds the calico-node command line: the per-node agent that
// will run startup, BGP and felix together.
package agent

import (
	"errors"
	"io"

	"github.com/palisade-net/palisade/libcalico/buildinfo"
	"github.com/spf13/cobra"
)

// NewRoot returns the calico-node root command writing to out and errOut.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "calico-node",
		Short: "The Palisade per-node agent",
		Long: "calico-node is the per-node agent of Palisade: node registration, the BGP\n" +
			"fabric and the policy dataplane. This build does not run the agent yet;\n" +
			"only `version` works.",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("calico-node: the agent is not implemented in this build; see `calico-node --help`")
		},
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Display the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Print(buildinfo.Get().Lines("Version"))
			return nil
		},
	})
	return root
}
