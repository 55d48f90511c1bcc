package commands

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/node/status"
)

// notRunning is what `node status` prints, on standard output as Calico
// does, when no calico-node runs here.
const notRunning = "Calico process is not running."

func newNodeStatusCommand(a *app, nf *nodeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether calico-node runs here, and its BGP peers",
		Long: `Print whether calico-node runs on this host and the state of its BGP
sessions (IPv4 and IPv6), read from the agent's status socket. Exits 1 with
"Calico process is not running." when it does not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			rep, err := status.Fetch(ctx, nf.socket())
			if err != nil {
				if pid := status.RunningPID(nf.pidFile()); pid != 0 {
					fmt.Fprint(a.env.Out, "Calico process is running.\n\n")
					return fmt.Errorf("Error reading the status of calico-node (pid %d): %w", pid, err)
				}
				fmt.Fprintln(a.env.Out, notRunning)
				return &ExitError{Code: 1}
			}
			return writeNodeStatus(a.env.Out, rep)
		},
	}
}

// writeNodeStatus prints a report as Calico's `calicoctl node status` does.
func writeNodeStatus(w io.Writer, rep status.Report) error {
	var b strings.Builder
	b.WriteString("Calico process is running.\n\n")
	if d := rep.Datastore; d != nil && !d.Reachable {
		fmt.Fprintf(&b, "The datastore (%s) has not answered since %s: %s\nForwarding and policy stay as they are; changes wait until it answers.\n\n",
			strings.Join(d.Endpoints, ","), status.FormatSince(d.Since, time.Now()), d.Error)
	}
	if !rep.BGPRunning {
		b.WriteString("None of the BGP backend processes (BIRD or GoBGP) are running.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	v4, v6 := status.SplitPeers(rep.Peers)
	for _, fam := range []struct {
		name  string
		peers []status.PeerStatus
	}{{"IPv4", v4}, {"IPv6", v6}} {
		fmt.Fprintf(&b, "%s BGP status\n", fam.name)
		if len(fam.peers) == 0 {
			fmt.Fprintf(&b, "No %s peers found.\n\n", fam.name)
			continue
		}
		rows := make([][]string, len(fam.peers))
		for i, p := range fam.peers {
			rows[i] = []string{p.Address, p.Type, p.State, p.Since, p.Info}
		}
		b.WriteString(renderBoxTable([]string{"PEER ADDRESS", "PEER TYPE", "STATE", "SINCE", "INFO"}, rows))
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// renderBoxTable draws a +---+ bordered table: headers centred, cells left
// aligned, each column as wide as its widest entry plus one space a side.
func renderBoxTable(headers []string, rows [][]string) string {
	widths := make([]int, len(headers))
	for i, h := range headers {
		widths[i] = len(h)
	}
	for _, r := range rows {
		for i, c := range r {
			if i < len(widths) && len(c) > widths[i] {
				widths[i] = len(c)
			}
		}
	}
	var b strings.Builder
	rule := func() {
		b.WriteByte('+')
		for _, w := range widths {
			b.WriteString(strings.Repeat("-", w+2))
			b.WriteByte('+')
		}
		b.WriteByte('\n')
	}
	rule()
	b.WriteByte('|')
	for i, h := range headers {
		pad := widths[i] - len(h)
		left := pad / 2
		b.WriteString(" " + strings.Repeat(" ", left) + h + strings.Repeat(" ", pad-left) + " |")
	}
	b.WriteByte('\n')
	rule()
	for _, r := range rows {
		b.WriteByte('|')
		for i := range widths {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			b.WriteString(" " + c + strings.Repeat(" ", widths[i]-len(c)) + " |")
		}
		b.WriteByte('\n')
	}
	rule()
	return b.String()
}
