package lab

import (
	"context"
	"strings"
	"testing"
	"time"

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
