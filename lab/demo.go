package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
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
	// KubeBinDir holds the Kubernetes binaries (as Options.KubeBinDir).
	KubeBinDir string
}

// Demo shows a whole fabric: three nodes, mesh off and a BIRD route
// reflector as every node's global peer (applied with calicoctl), a
// Kubernetes control plane with calico-kube-controllers, two pods per node
// (Pod objects wired by the calico CNI plugin), each node's `calicoctl
// node status` and routes, the ping matrix of every pod to every other
// pod, then one NetworkPolicy applied with kubectl taking effect. Unless
// Keep, it removes everything at the end. It fails when a pair of pods
// cannot reach each other, or the policy does not take effect.
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
	fmt.Fprintf(out, "── Palisade demo: 3 nodes, BIRD route reflector, Kubernetes, 6 pods ──\n")
	l, err := Up(ctx, Options{Name: o.Name, Nodes: 3, RR: RRBird2, BinDir: o.BinDir, StateRoot: o.StateRoot, Progress: out,
		Kubernetes: true, KubeBinDir: o.KubeBinDir})
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
	fmt.Fprintf(out, "\n── pods: two per node, Pod objects wired by the calico CNI plugin ──\n")
	for _, n := range l.Nodes() {
		for _, s := range []string{"a", "b"} {
			if _, err := l.AddPodWith(ctx, n.Name, "demo", fmt.Sprintf("pod-%d%s", n.Index, s), demoPod(n.Index, s)); err != nil {
				return err
			}
		}
	}
	if pods, err := l.KubectlOutput(ctx, "", "get", "pods", "-n", "demo", "-o", "wide", "--show-labels"); err == nil {
		fmt.Fprintf(out, "$ kubectl get pods -n demo -o wide --show-labels\n%s", indent(pods))
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
	if err := demoPolicy(ctx, l, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n✓ demo done in %s\n", time.Since(began).Round(100*time.Millisecond))
	if o.Keep {
		fmt.Fprintf(out, "\nThe lab %s keeps running.\n", l.Name())
		l.PrintHints(out, o.LabCommand)
	}
	return nil
}

// demoPod is a demo pod: the a pods serve TCP 80 as app=web; the b pods
// are clients, role=frontend except on node 3.
func demoPod(node int, s string) PodOptions {
	if s == "a" {
		return PodOptions{Labels: map[string]string{"app": "web"}, Serve: []ServePort{{Port: 80, Protocol: ProtoTCP}}}
	}
	role := "frontend"
	if node == 3 {
		role = "batch"
	}
	return PodOptions{Labels: map[string]string{"role": role}}
}

// demoNetworkPolicy admits only role=frontend pods to the web pods, on
// TCP 80.
const demoNetworkPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: web-from-frontend
  namespace: demo
spec:
  podSelector:
    matchLabels: {app: web}
  ingress:
  - from:
    - podSelector:
        matchLabels: {role: frontend}
    ports:
    - {protocol: TCP, port: 80}
`

// demoPolicy probes every client pod to every web pod on TCP 80, applies
// the NetworkPolicy with kubectl, shows the Calico policy
// calico-kube-controllers made of it, and probes again until the matrix
// shows it enforced.
func demoPolicy(ctx context.Context, l *Lab, out io.Writer) error {
	var clients, webs []Pod
	for _, p := range l.Pods() {
		if p.Labels["app"] == "web" {
			webs = append(webs, p)
		} else {
			clients = append(clients, p)
		}
	}
	matrix := func() (string, map[string]bool) {
		ok := map[string]bool{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range clients {
			for _, w := range webs {
				wg.Go(func() {
					got := l.Probe(ctx, c.Key(), w.IP, 80, ProtoTCP, 500*time.Millisecond) == nil
					mu.Lock()
					ok[c.Name+">"+w.Name] = got
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		var b strings.Builder
		fmt.Fprintf(&b, "%-22s", "TCP 80: client \\ web")
		for _, w := range webs {
			fmt.Fprintf(&b, " %-11s", w.Name)
		}
		b.WriteString("\n")
		for _, c := range clients {
			fmt.Fprintf(&b, "%-22s", c.Name+" ("+c.Labels["role"]+")")
			for _, w := range webs {
				mark := "✗ dropped"
				if ok[c.Name+">"+w.Name] {
					mark = "✓"
				}
				fmt.Fprintf(&b, " %-11s", mark)
			}
			b.WriteString("\n")
		}
		return b.String(), ok
	}
	fmt.Fprintf(out, "\n── one NetworkPolicy: only role=frontend reaches app=web, on TCP 80 ──\n")
	before, _ := matrix()
	fmt.Fprintf(out, "before:\n%s", indent(before))
	fmt.Fprintf(out, "$ kubectl apply -f -\n%s", indent(demoNetworkPolicy))
	applied := time.Now()
	res, err := l.KubectlOutput(ctx, demoNetworkPolicy, "apply", "-f", "-")
	fmt.Fprint(out, indent(res))
	if err != nil {
		return err
	}
	deadline := applied.Add(15 * time.Second)
	for {
		round := time.Now()
		m, ok := matrix()
		took := round.Sub(applied)
		enforced := true
		for _, c := range clients {
			for _, w := range webs {
				if ok[c.Name+">"+w.Name] != (c.Labels["role"] == "frontend") {
					enforced = false
				}
			}
		}
		if enforced {
			if pol, err := l.Calicoctl(ctx, l.Nodes()[0].Name, nil, "get", "networkpolicy", "-n", "demo", "-o", "wide"); err == nil {
				fmt.Fprintf(out, "$ calicoctl get networkpolicy -n demo -o wide   (written by calico-kube-controllers)\n%s", indent(pol))
			}
			fmt.Fprintf(out, "after (probed until enforced; %s after kubectl apply):\n%s", took.Round(10*time.Millisecond), indent(m))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the NetworkPolicy is not enforced %s after kubectl apply:\n%s", time.Since(applied).Round(time.Second), m)
		}
	}
}
