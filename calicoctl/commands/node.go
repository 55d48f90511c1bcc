package commands

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/node/status"
)

// nodeFlags are shared by the node subcommands.
type nodeFlags struct {
	runDir string
	logDir string
}

func (f *nodeFlags) pidFile() string { return filepath.Join(f.runDir, status.PIDFileName) }
func (f *nodeFlags) socket() string  { return filepath.Join(f.runDir, status.SocketName) }

// defaultLogDir is where calico-node's log goes.
const defaultLogDir = "/var/log/calico"

func newNodeCommand(a *app) *cobra.Command {
	nf := &nodeFlags{}
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run, inspect and diagnose calico-node on this host",
		Long: `Commands for the calico-node agent on this host: run starts it as a local
daemon process, status shows whether it runs and its BGP peers, checksystem
checks the kernel, diags collects diagnostics into a tarball.`,
	}
	runDir := status.DefaultRunDir
	if v := a.env.Getenv("CALICO_RUN_DIR"); v != "" {
		runDir = v
	}
	cmd.PersistentFlags().StringVar(&nf.runDir, "run-dir", runDir,
		"Directory of calico-node's pid file and status socket (CALICO_RUN_DIR).")
	cmd.AddCommand(
		newNodeRunCommand(a, nf),
		newNodeStatusCommand(a, nf),
		newNodeCheckSystemCommand(a, nf),
		newNodeDiagsCommand(a, nf),
	)
	return cmd
}
