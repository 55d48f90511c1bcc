package agent

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/bpf/inspect"
)

// newBPFCommand is `calico-node bpf …`: what the eBPF dataplane of this
// network namespace holds, read from its pinned maps and programs (as
// Calico's `calico-node -bpf …`).
func newBPFCommand() *cobra.Command {
	root := palbpf.DefaultRoot
	cmd := &cobra.Command{
		Use:   "bpf",
		Short: "Inspect the eBPF dataplane of this node (bpfEnabled)",
		Args:  cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&root, "bpffs-root", root, "bpffs directory of the dataplane's pins")
	view := func(f func(out io.Writer, v *inspect.View) error) func(*cobra.Command, []string) error {
		return func(c *cobra.Command, _ []string) error {
			v, err := inspect.Open(root, nil)
			if err != nil {
				return fmt.Errorf("%w (is FelixConfiguration bpfEnabled set?)", err)
			}
			defer v.Close()
			return f(c.OutOrStdout(), v)
		}
	}
	dump := func(use, short string, run func(out io.Writer, v *inspect.View) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs, RunE: view(run)}
	}
	group := func(use, short string, sub ...*cobra.Command) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs}
		c.AddCommand(sub...)
		return c
	}
	policyDump := &cobra.Command{
		Use:   "dump IFACE",
		Short: "The entry of an interface and the rules of its programs, with packet counts",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return view(func(out io.Writer, v *inspect.View) error {
				ifs, cs, err := interfacesAndCounters(v)
				if err != nil {
					return err
				}
				for _, in := range ifs {
					if in.Name == args[0] {
						inspect.WritePolicy(out, in, cs)
						return nil
					}
				}
				return fmt.Errorf("interface %q has no entry in the eBPF dataplane", args[0])
			})(c, nil)
		},
	}
	counters := func(out io.Writer, v *inspect.View) error {
		ifs, cs, err := interfacesAndCounters(v)
		if err != nil {
			return err
		}
		inspect.WriteCounters(out, ifs, cs)
		return nil
	}
	countersCmd := dump("counters", "Packets counted per interface: per reason and per rule", counters)
	countersCmd.AddCommand(dump("dump", "Packets counted per interface: per reason and per rule", counters))
	cmd.AddCommand(
		group("policy", "Policy programs", policyDump),
		group("ipsets", "IP sets", dump("dump", "Every IP set and its members", func(out io.Writer, v *inspect.View) error {
			sets, err := v.IPSets()
			if err != nil {
				return err
			}
			inspect.WriteIPSets(out, sets)
			return nil
		})),
		group("conntrack", "Connection tracking", dump("dump", "Every conntrack entry (per interface)", func(out io.Writer, v *inspect.View) error {
			flows, err := v.Conntrack()
			if err != nil {
				return err
			}
			var ts unix.Timespec
			_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
			inspect.WriteConntrack(out, flows, uint64(ts.Nano()))
			return nil
		})),
		countersCmd,
	)
	return cmd
}

func interfacesAndCounters(v *inspect.View) ([]inspect.Interface, []inspect.Counter, error) {
	ifs, err := v.Interfaces()
	if err != nil {
		return nil, nil, err
	}
	cs, err := v.Counters()
	return ifs, cs, err
}
