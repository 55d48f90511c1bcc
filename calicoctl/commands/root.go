// Package commands builds the calicoctl command tree (cobra) and runs it.
package commands

import (
	"io"

	"github.com/spf13/cobra"
)

// NewRoot returns the calicoctl root command writing to out and errOut.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "calicoctl",
		Short: "Manage Palisade (Calico-compatible) resources, IPAM and nodes",
		Long: "calicoctl manages the projectcalico.org/v3 resources of a Palisade cluster.\n" +
			"It speaks the same verbs, kinds and output formats as Calico's calicoctl.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(newVersionCommand())
	return root
}
