package lab

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/bpf/inspect"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/libcalico/names"
)

// checkBPFCommands runs `calico-node bpf …` on a node of an eBPF lab and
// checks what each prints: a pod's interface with its rules and counts,
// the IP sets, the conntrack entries of the probes, the counters.
func checkBPFCommands(t *testing.T, l *Lab) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var pod Pod
	for _, p := range l.Pods() {
		if p.Node == l.Nodes()[0].Name {
			pod = p
			break
		}
	}
	iface := names.VethNameForWorkload(pod.Namespace, pod.Name)
	node := pod.Node
	run := func(args ...string) string {
		out, err := l.Output(ctx, node, nil, append([]string{"calico-node", "bpf"}, args...)...)
		if err != nil {
			t.Fatalf("calico-node bpf %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// A policy with a selector: its IP set holds the selected pods.
	allowA := `apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: bpf-dump}
spec:
  order: 1
  selector: all()
  types: [Ingress]
  ingress: [{action: Allow, source: {selector: pod == 'a'}}, {action: Allow}]
`
	if err := l.Apply(ctx, allowA); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := l.Calicoctl(ctx, node, nil, "delete", "globalnetworkpolicy", "bpf-dump"); err != nil {
			t.Error(err)
		}
	}()
	var memberA string
	for _, p := range l.Pods() {
		if p.Name == "a" {
			memberA = p.IP.String()
		}
	}
	waitFor(t, 10*time.Second, "the policy's IP set in the maps", func() (bool, string) {
		out := run("ipsets", "dump")
		return strings.Contains(out, "  "+memberA+"\n"), out
	})
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"policy", "dump", iface}, []string{"Interface " + iface, ": workload", "allowed sources: " + pod.IP.String() + "/32", "Stage normal-in", "Stage normal-out", "packets="}},
		{[]string{"ipsets", "dump"}, []string{"IP set s:", "members", memberA}},
		{[]string{"conntrack", "dump"}, []string{"INTERFACE", iface, "established"}},
		{[]string{"counters"}, []string{"INTERFACE", "allowed: established flow"}},
	} {
		out := run(c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("calico-node bpf %s: no %q in:\n%s", strings.Join(c.args, " "), w, out)
			}
		}
	}
	if out, err := l.Output(ctx, node, nil, "calico-node", "bpf", "policy", "dump", "nosuchiface"); err == nil {
		t.Errorf("policy dump of an unknown interface succeeded:\n%s", out)
	}
}

// TestBPFBypassAcrossNodes: with the eBPF dataplane and its host
// conntrack bypass (the default), on the vxlan backend across two subnets
// (through the tunnel) and on one subnet (pods routed directly), a TCP
// connection between pods on two nodes carries 300 exchanges with the
// programs sending the packets on themselves: the sender's workload
// interface (counted "forwarded" there), and, routed directly, the
// receiving node's fabric interface (a data interface).
func TestBPFBypassAcrossNodes(t *testing.T) {
	for _, o := range []Options{
		{Nodes: 2, Subnets: 2, Backend: BackendVXLAN, BPF: true},
		{Nodes: 2, BPF: true},
	} {
		name := "vxlan"
		if o.Backend == "" {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) {
			l := newLab(t, o)
			pods := addPods(t, l, "default", 1)
			requireReachable(t, l, name)
			a, b := pods[0], pods[1]
			var ln net.Listener
			if err := l.InNamespace(b.Key(), func() (err error) {
				ln, err = net.Listen("tcp", netip.AddrPortFrom(b.IP, 7400).String())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
				}
			}()
			before := forwardedOn(t, l, a.Node, names.VethNameForWorkload(a.Namespace, a.Name))
			dataBefore := forwardedOn(t, l, b.Node, "eth0")
			var c net.Conn
			if err := l.InNamespace(a.Key(), func() (err error) {
				c, err = net.DialTimeout("tcp", netip.AddrPortFrom(b.IP, 7400).String(), 5*time.Second)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			buf := []byte{'x'}
			for i := range 300 {
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Write(buf); err != nil {
					t.Fatalf("exchange %d: %v", i, err)
				}
				if _, err := c.Read(buf); err != nil {
					t.Fatalf("exchange %d: %v", i, err)
				}
			}
			if got := forwardedOn(t, l, a.Node, names.VethNameForWorkload(a.Namespace, a.Name)) - before; got < 250 {
				t.Errorf("%s's program sent on %d of 300 requests itself, want nearly all", a.Key(), got)
			}
			// Routed directly, the requests reach node2 on its fabric
			// interface, eth0 (bpfDataIfacePattern's default matches it);
			// tunnelled, on vxlan.calico, which it does not match.
			got := forwardedOn(t, l, b.Node, "eth0") - dataBefore
			if name == "direct" && got < 250 {
				t.Errorf("%s's data interface eth0 sent on %d of 300 requests itself, want nearly all", b.Node, got)
			}
		})
	}
}

// forwardedOn is the packets the eBPF programs of a node sent on
// themselves (host conntrack bypass) from an interface.
func forwardedOn(t *testing.T, l *Lab, node, iface string) uint64 {
	t.Helper()
	n, ok := l.Node(node)
	if !ok {
		t.Fatalf("no node %s", node)
	}
	run, err := nsexec.New(nsPath(n.NS))
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	v, err := inspect.Open("", run)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got, err := v.ReasonPackets(iface, palbpf.ReasonForwarded)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
