package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/node/status"
)

func newPolicyStatsCommand(a *app, ns *nodeSocket) *cobra.Command {
	var node, output string
	cmd := &cobra.Command{
		Use:   "stats [--node NODE] [POLICY]",
		Short: "Show the packet and byte counters of each policy and profile rule on a node",
		Long: `Show, for each rule of each policy and profile felix has written on a node,
the packets and bytes it matched (the dataplane's rule counters, since the
rule was last written). POLICY limits the list to the policies or profiles
of that name (NAME, NAMESPACE/NAME or TIER.NAME).

The counters come from the calico-node running here (its status socket in
--run-dir); --node names the node it must be. They are the dataplane's:
iptables rule counters, or the eBPF dataplane's counter map.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			output = strings.ToLower(output)
			if output != "" && output != formatPS && output != formatJSON && output != formatYAML {
				return fmt.Errorf("unrecognized output format '%s' (want ps, json or yaml)", output)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			if node != "" {
				if err := ns.check(ctx, node); err != nil {
					return err
				}
			}
			cs, err := status.RuleStats(ctx, ns.path())
			if err != nil {
				return err
			}
			if len(args) == 1 {
				cs = filterCounters(cs, args[0])
				if len(cs) == 0 {
					return fmt.Errorf("no rule of a policy or profile named %q is written on this node", args[0])
				}
			}
			switch output {
			case formatJSON:
				if cs == nil {
					cs = []calc.RuleCounter{}
				}
				b, err := json.MarshalIndent(cs, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.env.Out, "%s\n", b)
				return err
			case formatYAML:
				b, err := yaml.Marshal(cs)
				if err != nil {
					return err
				}
				_, err = a.env.Out.Write(b)
				return err
			}
			w := tabwriter.NewWriter(a.env.Out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "KIND\tTIER\tPOLICY\tDIRECTION\tRULE\tACTION\tPACKETS\tBYTES")
			for _, c := range cs {
				name := c.Name
				if c.Namespace != "" {
					name = c.Namespace + "/" + c.Name
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", c.Kind, dash(c.Tier), name, c.Direction, c.Index, c.Action,
					strconv.FormatUint(c.Packets, 10), strconv.FormatUint(c.Bytes, 10))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "The node the local calico-node must be.")
	cmd.Flags().StringVarP(&output, "output", "o", formatPS, "Output format: ps, json or yaml.")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// filterCounters keeps the counters of the policies or profiles name
// names: NAME, NAMESPACE/NAME or TIER.NAME.
func filterCounters(cs []calc.RuleCounter, name string) []calc.RuleCounter {
	var out []calc.RuleCounter
	for _, c := range cs {
		full := c.Name
		if c.Namespace != "" {
			full = c.Namespace + "/" + c.Name
		}
		if name == c.Name || name == full || c.Tier != "" && name == c.Tier+"."+c.Name {
			out = append(out, c)
		}
	}
	return out
}
