package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// DemoOptions configure Demo.
type DemoOptions struct {
	// Name of the lab (default "demo").
	Name string
	// Keep leaves the lab running at the end.
	Keep bool
	// BinDir and StateRoot as in Options.
	BinDir, StateRoot string
	// Out receives the demo's output.
	Out io.Writer
	// LabCommand is how the user runs the lab CLI, for the instructions
	// printed with Keep (default "bin/lab").
	LabCommand string
}

// Demo shows a whole fabric: three nodes, mesh off and a BIRD route
// reflector as every node's global peer (applied with calicoctl), two pods
// per node from the calico CNI plugin, each node's `calicoctl node status`
// and routes, and the ping matrix of every pod to every other pod. Unless
// Keep, it removes everything at the end. It fails when a pair of pods
// cannot reach each other.
func Demo(ctx context.Context, o DemoOptions) (err error) {
	if o.Name == "" {
		o.Name = "demo"
	}
	if o.LabCommand == "" {
		o.LabCommand = "bin/lab"
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	began := time.Now()
	fmt.Fprintf(out, "── Palisade demo: 3 nodes, BIRD route reflector, 6 pods ──\n")
	l, err := Up(ctx, Options{Name: o.Name, Nodes: 3, RR: RRBird2, BinDir: o.BinDir, StateRoot: o.StateRoot, Progress: out})
	if err != nil {
		return err
	}
	defer func() {
		if o.Keep && err == nil {
			_ = l.Close()
			return
		}
		if derr := l.Down(context.Background()); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	fmt.Fprintf(out, "\n── pods: two per node, through the calico CNI plugin ──\n")
	for _, n := range l.Nodes() {
		for _, s := range []string{"a", "b"} {
			if _, err := l.AddPod(ctx, n.Name, "demo", fmt.Sprintf("pod-%d%s", n.Index, s)); err != nil {
				return err
			}
		}
	}
	d, err := l.WaitPodRoutes(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "✓ every node routes every other node's pods (BGP, %s)\n", d.Round(10*time.Millisecond))
	fmt.Fprintf(out, "\n── every node: calicoctl node status and routes ──\n")
	for _, n := range l.Nodes() {
		st, _ := l.NodeStatus(ctx, n.Name)
		routes, _ := l.Routes(ctx, n.Name)
		fmt.Fprintf(out, "\n%s (%s)$ calicoctl node status\n%s%s (%s)$ ip route\n%s", n.Name, n.IP, indent(st), n.Name, n.IP, indent(routes))
		if strings.Contains(st, "not available") {
			// An agent that does not report its peers: ask GoBGP.
			if ss, err := l.Sessions(ctx, n.Name); err == nil {
				for _, s := range ss {
					fmt.Fprintf(out, "  (GoBGP: %s AS %d %s)\n", s.Peer, s.AS, s.State)
				}
			}
		}
	}
	if rr, err := l.Bird(ctx, "rr", "show", "route"); err == nil {
		fmt.Fprintf(out, "\nrr (BIRD route reflector)$ birdc show route\n%s", indent(rr))
	}
	fmt.Fprintf(out, "\n── ping matrix: every pod to every other pod ──\n")
	m, werr := l.WaitReachable(ctx, 20*time.Second)
	m.Print(out)
	if werr != nil {
		return werr
	}
	fmt.Fprintf(out, "\n✓ demo done in %s\n", time.Since(began).Round(100*time.Millisecond))
	if o.Keep {
		fmt.Fprintf(out, "\nThe lab %s keeps running.\n", l.Name())
		l.PrintHints(out, o.LabCommand)
	}
	return nil
}
