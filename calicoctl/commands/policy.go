package commands

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/node/status"
)

// nodeSocket is how the policy commands reach a running calico-node: its
// run directory (--run-dir, CALICO_RUN_DIR) holds the status socket; the
// node named must be the one serving it.
type nodeSocket struct {
	runDir string
}

func (n *nodeSocket) path() string { return filepath.Join(n.runDir, status.SocketName) }

// check asks the agent at the socket who it is: it must be node.
func (n *nodeSocket) check(ctx context.Context, node string) error {
	rep, err := status.Fetch(ctx, n.path())
	if err != nil {
		return fmt.Errorf("no calico-node answers on %s (is it running here? --run-dir, CALICO_RUN_DIR): %w", n.path(), err)
	}
	if rep.NodeName != node {
		return fmt.Errorf("the calico-node on %s is node %q, not %q: run calicoctl on node %s, or point --run-dir at its run directory", n.path(), rep.NodeName, node, node)
	}
	return nil
}

func newPolicyCommand(a *app) *cobra.Command {
	ns := &nodeSocket{}
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Explain policy decisions and show per-rule counters",
		Long: `Commands about network policy as felix enforces it: explain says why a
packet between two endpoints is allowed or denied, rule by rule; stats shows
the packet and byte counters of each policy rule on a node.`,
	}
	runDir := status.DefaultRunDir
	if v := a.env.Getenv("CALICO_RUN_DIR"); v != "" {
		runDir = v
	}
	cmd.PersistentFlags().StringVar(&ns.runDir, "run-dir", runDir,
		"Directory of the local calico-node's status socket, for --at-node and stats (CALICO_RUN_DIR).")
	cmd.AddCommand(newPolicyExplainCommand(a, ns), newPolicyStatsCommand(a, ns))
	return cmd
}
