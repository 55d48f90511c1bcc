package felix

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/bpf/inspect"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// TestInspectorCounters runs felix with an Inspector on the iptables and
// the eBPF dataplane. The rule the explanation names as the decider of a
// connection is the one whose counter moved, in RuleCounters and in the
// explanation; datagrams sent one flow each move the allowing rule and the
// denying rule by exactly the packets and bytes sent, and the policy's
// other rule not at all. Then a rule of the policy changes: on both
// dataplanes every rule of that policy starts again from zero (iptables
// rewrites the policy's chain; eBPF keys its counters by the policy's
// rules), while another policy of the same endpoint keeps counting.
func TestInspectorCounters(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) {
			c := newClusterNoFelix(t, dp, false)
			in := NewInspector()
			cfg := c.felixConfigOf()
			cfg.Inspector = in
			runFelix(t, c.ctx, c.cancel, cfg)
			c.addPod("ns-a", "web", "10.65.0.1", map[string]string{"app": "web"}, "sa-w")
			c.addPod("ns-a", "client", "10.65.0.2", map[string]string{"app": "client"}, "sa-x")
			const policy = `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: ns-a}
spec:
  selector: app == 'web'
  types: [Ingress]
  ingress:
  - {action: Allow, protocol: TCP, source: {selector: app == 'client'}, destination: {ports: [8080]}}
  - {action: Allow, protocol: UDP, source: {selector: app == 'client'}, destination: {ports: [8080]}}
  - {action: Deny, protocol: UDP, destination: {ports: [%d]}}
`
			rs := c.apply(fmt.Sprintf(policy, 9000))
			rs = append(rs, c.apply(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: keep, namespace: ns-a}
spec:
  selector: app == 'web'
  types: [Ingress]
  ingress:
  - {action: Allow, protocol: UDP, destination: {ports: [7000]}}
`)...)
			c.waitPolicies(rs, true)
			c.expect(probe{from: "client", to: "web", proto: "tcp", port: 8080, allowed: true},
				probe{from: "client", to: "web", proto: "tcp", port: 8081})
			ref := func(i int) calc.RuleRef {
				return calc.RuleRef{Kind: "NetworkPolicy", Tier: "default", Namespace: "ns-a", Name: "web", Direction: "ingress", Index: i}
			}
			keep := calc.RuleRef{Kind: "NetworkPolicy", Tier: "default", Namespace: "ns-a", Name: "keep", Direction: "ingress"}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			q := calc.Query{From: calc.End{Namespace: "ns-a", Name: "client"}, To: calc.End{Namespace: "ns-a", Name: "web"}, Protocol: 6, SrcPort: 40000, DstPort: 8080}
			x, err := in.Explain(ctx, q)
			if err != nil || x.Verdict != calc.VerdictAllow || x.Sides[1].Decider.Rule == nil || *x.Sides[1].Decider.Rule != ref(0) {
				t.Fatalf("explain: %v %+v", err, x)
			}
			var counted *uint64
			eachRule(&x.Sides[1], func(r calc.RuleRef, res *calc.RuleResult) {
				if r == ref(0) {
					counted = res.Packets
				}
			})
			if counted == nil || *counted == 0 || len(x.Notes) > 0 {
				t.Fatalf("the deciding rule's counter in the explanation: %v (want > 0), notes %q", counted, x.Notes)
			}
			read := func() map[calc.RuleRef]calc.RuleCounter {
				t.Helper()
				cs, err := in.RuleCounters(ctx)
				if err != nil {
					t.Fatalf("RuleCounters: %v", err)
				}
				out := map[calc.RuleRef]calc.RuleCounter{}
				for _, c := range cs {
					out[c.RuleRef] = c
				}
				return out
			}
			before := read()
			if c0 := before[ref(0)]; c0.Packets < *counted || c0.Action != calc.Allow || before[ref(2)].Action != calc.Deny {
				t.Fatalf("RuleCounters %+v: want rule 0 an Allow with >= %d packets, rule 2 a Deny", before, *counted)
			}
			_, webIP, _ := c.endpoint("web", false)
			client := c.pods["client"].run
			const size = 100 // payload; the IP packet is 128 bytes
			sendUDP(t, client, webIP, 8080, 5, size)
			sendUDP(t, client, webIP, 9000, 3, size)
			sendUDP(t, client, webIP, 7000, 4, size)
			after := read()
			moved := func(r calc.RuleRef, packets int) {
				t.Helper()
				dp, db := after[r].Packets-before[r].Packets, after[r].Bytes-before[r].Bytes
				if dp != uint64(packets) || db != uint64(packets*(28+size)) {
					t.Errorf("rule %d: moved by %d packets, %d bytes; want %d and %d", r.Index, dp, db, packets, packets*(28+size))
				}
			}
			moved(ref(0), 0)
			moved(ref(1), 5)
			moved(ref(2), 3)
			moved(keep, 4)

			// Rule 2 changes; rules 0 and 1 do not.
			c.apply(fmt.Sprintf(policy, 9001))
			c.expect(probe{from: "client", to: "web", proto: "udp", port: 9000, allowed: false})
			// The edit is live once a datagram to 9001 moves rule 2.
			sent := 0
			c.waitFor("the changed policy in the dataplane", func() bool {
				c0 := read()[ref(2)].Packets
				sendUDP(t, client, webIP, 9001, 1, size)
				sent++
				return read()[ref(2)].Packets == c0+1
			})
			edited := read()
			sendUDP(t, client, webIP, 8080, 2, size)
			sendUDP(t, client, webIP, 7000, 1, size)
			final := read()
			if got := final[ref(1)].Packets - edited[ref(1)].Packets; got != 2 {
				t.Errorf("rule 1 after the edit moved by %d packets, want 2", got)
			}
			if got := final[keep].Packets - edited[keep].Packets; got != 1 {
				t.Errorf("the other policy's rule after the edit moved by %d packets, want 1", got)
			}
			// The edited policy's rules start again; the other policy
			// keeps its count.
			if edited[ref(1)].Packets >= after[ref(1)].Packets {
				t.Errorf("%s: rule 1 kept %d packets (before the edit %d) though its policy changed", dp, edited[ref(1)].Packets, after[ref(1)].Packets)
			}
			if edited[keep].Packets < after[keep].Packets {
				t.Errorf("%s: the other policy's rule went from %d to %d packets when this policy changed", dp, after[keep].Packets, edited[keep].Packets)
			}
			if dp == "BPF" {
				// The old rules' counters, which no program holds now,
				// are deleted by the next sweep (every 10 s).
				deadline := time.Now().Add(25 * time.Second)
				for stale := staleRuleCounters(t, c); stale > 0; stale = staleRuleCounters(t, c) {
					if time.Now().After(deadline) {
						t.Fatalf("eBPF: %d rule counters of no current program still there", stale)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			if n := edited[ref(2)].Packets; n == 0 || n > uint64(sent) {
				t.Errorf("the changed rule 2 has %d packets, %d sent to its port since the edit (the old rule had %d)", n, sent, after[ref(2)].Packets)
			}
		})
	}
}

// sendUDP sends n datagrams of size bytes from run's namespace to
// dst:port, each from a socket of its own (a new flow each, so each meets
// policy).
func sendUDP(t *testing.T, run *nsexec.Runner, dst netip.Addr, port, n, size int) {
	t.Helper()
	if err := run.Do(func() error {
		for range n {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, uint16(port))))
			if err != nil {
				return err
			}
			_, err = c.Write(make([]byte, size))
			c.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("sending to %s:%d: %v", dst, port, err)
	}
}

// staleRuleCounters counts the eBPF rule counters whose id no program of
// their interface's stage holds.
func staleRuleCounters(t *testing.T, c *cluster) int {
	t.Helper()
	v, err := c.bpfView()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ifs, err := v.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := v.Counters()
	if err != nil {
		t.Fatal(err)
	}
	held := map[inspect.CounterKey]bool{}
	for _, in := range ifs {
		for st, s := range in.Stages {
			if s != nil && s.Desc != nil {
				for _, sl := range s.Desc.Slots {
					held[inspect.CounterKey{Ifindex: in.Ifindex, Stage: st, Rule: sl.ID}] = true
				}
			}
		}
	}
	n := 0
	for _, ct := range cs {
		if ct.Stage != palbpf.StageGeneral && !held[ct.Key()] {
			n++
		}
	}
	return n
}
