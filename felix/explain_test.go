package felix

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/rules"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// This file checks calc's explanation against the kernel: every probe a
// kernel test of this package expects (c.expect calls agree once the
// kernel showed them all), and random policies (TestExplainAgreesWithKernel).

// query is the explain question of a probe; ok false when an end is not
// an endpoint of the datastore (a pod the test plumbed without one).
func (c *cluster) query(pr probe) (calc.Query, bool) {
	end := func(name string) (calc.End, bool) {
		switch name {
		case "ext":
			return calc.End{Address: extAddr.String()}, true
		case "node":
			return calc.End{Address: nodeAddr.String()}, true
		}
		p := c.pods[name]
		if p == nil || p.wep == nil {
			return calc.End{}, false
		}
		if pr.ipv6 {
			return calc.End{Address: p.ip6.String()}, true
		}
		return calc.End{Namespace: p.ns, Name: p.name}, true
	}
	// A probe to a port nothing serves fails whatever the policy.
	switch {
	case pr.to == "ext" && !slices.Contains(extPorts, pr.port), pr.to == "node" && !slices.Contains(nodePorts, pr.port):
		if pr.proto == "tcp" || pr.proto == "udp" {
			return calc.Query{}, false
		}
	}
	from, ok1 := end(pr.from)
	to, ok2 := end(pr.to)
	q := calc.Query{From: from, To: to, Hosts: map[string]string{nodeAddr.String(): nodeName}}
	switch pr.proto {
	case "tcp":
		q.Protocol = 6
	case "udp":
		q.Protocol = 17
	case "sctp":
		q.Protocol = 132
	case "icmp":
		q.Protocol, q.ICMPType = 1, 8
	}
	if calc.ProtocolHasPorts(q.Protocol) {
		q.SrcPort, q.DstPort = 32768, uint16(pr.port)
	}
	return q, ok1 && ok2
}

// agree explains each probe from the datastore and fails the test where
// the explanation's verdict is not the probe's. It returns how many
// probes it checked.
func (c *cluster) agree(probes ...probe) int {
	c.t.Helper()
	g, _, err := calc.LoadCluster(c.ctx, c.store)
	if err != nil {
		c.t.Fatalf("loading the cluster to explain: %v", err)
	}
	checked := 0
	for _, pr := range probes {
		q, ok := c.query(pr)
		if !ok {
			continue
		}
		x, err := g.Explain(q)
		if err != nil {
			c.t.Errorf("explaining %s: %v", pr, err)
			continue
		}
		if x.Incomplete {
			c.t.Logf("explanation of %s is incomplete (%s): not compared", pr, strings.Join(x.Notes, "; "))
			continue
		}
		checked++
		if (x.Verdict == calc.VerdictAllow) != pr.allowed {
			b, _ := json.MarshalIndent(x, "", " ")
			c.t.Errorf("the kernel says %s, the explanation says %s:\n%s", pr, x.Verdict, b)
		}
	}
	return checked
}

// Vocabulary of the random policies.
var (
	randSelectors = []string{"all()", "app == 'web'", "app == 'client'", "projectcalico.org/namespace == 'ns-b'", "has(app) && app != 'web'"}
	randPeers     = []string{"", "app == 'client'", "app == 'web'", "projectcalico.org/namespace == 'ns-a'", "!has(app)"}
	randNSSel     = []string{"", "", "team == 'ns-b'", "all()"}
	randNets      = []string{"", "", "10.65.0.2/32", "10.65.0.0/31", "10.65.0.0/16"}
	randPorts     = []string{"", "", "[8080]", "[8081, 9000]", `["8081:9000"]`, "[http]", "[9001, http]"}
	randActions   = []string{"Allow", "Allow", "Deny", "Pass", "Log"}
	randProtos    = []string{"", "TCP", "UDP", "TCP", "UDP"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// randEntity is a random source or destination.
func randEntity(r *rand.Rand, withPorts bool) string {
	var f []string
	if s := pick(r, randPeers); s != "" {
		f = append(f, fmt.Sprintf("selector: %q", s))
	}
	if s := pick(r, randNSSel); s != "" {
		f = append(f, fmt.Sprintf("namespaceSelector: %q", s))
	}
	if r.IntN(5) == 0 {
		f = append(f, fmt.Sprintf("notSelector: %q", pick(r, randPeers[1:])))
	}
	if n := pick(r, randNets); n != "" {
		key := "nets"
		if r.IntN(3) == 0 {
			key = "notNets"
		}
		f = append(f, fmt.Sprintf("%s: [%s]", key, n))
	}
	if p := pick(r, randPorts); p != "" && withPorts {
		key := "ports"
		if r.IntN(4) == 0 {
			key = "notPorts"
		}
		f = append(f, key+": "+p)
	}
	return "{" + strings.Join(f, ", ") + "}"
}

// randPolicies is a random set of one to four policies in the default
// tier and a tier of random default action, each validated as calicoctl
// would.
func randPolicies(t *testing.T, r *rand.Rand) string {
	var docs []string
	def := pick(r, []string{"Deny", "Pass"})
	docs = append(docs, fmt.Sprintf("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: rnd}\nspec: {order: 50, defaultAction: %s}\n", def))
	for i := range 1 + r.IntN(4) {
		for {
			doc := randPolicy(r, i)
			rs, err := v3.Decode([]byte(doc))
			if err == nil && len(rs) == 1 {
				v3.Default(rs[0])
				err = v3.Validate(rs[0])
			}
			if err == nil {
				docs = append(docs, doc)
				break
			}
		}
	}
	return strings.Join(docs, "---\n")
}

func randPolicy(r *rand.Rand, i int) string {
	var b strings.Builder
	tier := pick(r, []string{"default", "default", "rnd"})
	name := fmt.Sprintf("p%d", i)
	if tier == "rnd" {
		name = "rnd." + name
	}
	if r.IntN(2) == 0 {
		fmt.Fprintf(&b, "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: %s}\nspec:\n", name)
	} else {
		fmt.Fprintf(&b, "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: %s, namespace: ns-a}\nspec:\n", name)
	}
	fmt.Fprintf(&b, "  tier: %s\n  selector: %q\n", tier, pick(r, randSelectors))
	if o := r.IntN(4); o > 0 {
		fmt.Fprintf(&b, "  order: %d\n", o)
	}
	var types []string
	for _, dir := range []string{"ingress", "egress"} {
		if r.IntN(3) == 0 {
			continue
		}
		types = append(types, strings.ToUpper(dir[:1])+dir[1:])
		fmt.Fprintf(&b, "  %s:\n", dir)
		for range r.IntN(3) {
			proto := pick(r, randProtos)
			fmt.Fprintf(&b, "  - action: %s\n", pick(r, randActions))
			if proto != "" {
				fmt.Fprintf(&b, "    protocol: %s\n", proto)
			}
			fmt.Fprintf(&b, "    source: %s\n    destination: %s\n", randEntity(r, false), randEntity(r, proto != ""))
		}
	}
	if len(types) == 0 {
		types = []string{"Ingress"}
	}
	fmt.Fprintf(&b, "  types: [%s]\n", strings.Join(types, ", "))
	return b.String()
}

// TestExplainAgreesWithKernel applies random policies (tiers, orders,
// Allow, Deny, Pass and Log, selectors, namespace selectors,
// notSelectors, nets, notNets, ports, ranges, named ports, notPorts) to a
// real felix and checks, for every pair of pods, protocol and port, that
// the explanation's verdict is what real packets see.
func TestExplainAgreesWithKernel(t *testing.T) {
	c := newCluster(t, "NFT")
	setupPods(c)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	names := []string{"web", "client", "other"}
	var probes []probe
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			for _, proto := range []string{"tcp", "udp"} {
				for _, port := range []int{8080, 8081, 9001} {
					probes = append(probes, probe{from: from, to: to, proto: proto, port: port})
				}
			}
		}
	}
	const rounds = 6
	for range rounds {
		yaml := randPolicies(t, r)
		rs := c.apply(yaml)
		chains := c.agreeKernel(probes, yaml)
		c.remove(rs)
		c.waitChains(chains, false)
	}
}

// waitChains waits until the chains are all present or all absent.
func (c *cluster) waitChains(chains []string, present bool) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := c.node.Run(c.save, "-t", "filter")
		ok := err == nil
		for _, ch := range chains {
			if strings.Contains(out, ":"+ch+" ") != present {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("chains %v present=%v: not reached in the kernel", chains, present)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// agreeKernel waits until the chains of every policy the explanations
// walked are in the kernel, then until the kernel shows, for every probe,
// the verdict the explanation gives (felix programs asynchronously),
// failing with the cells that never did. It returns those chains.
func (c *cluster) agreeKernel(probes []probe, yaml string) []string {
	c.t.Helper()
	g, _, err := calc.LoadCluster(c.ctx, c.store)
	if err != nil {
		c.t.Fatal(err)
	}
	want := make([]probe, len(probes))
	xs := make([]*calc.Explanation, len(probes))
	for i, pr := range probes {
		q, _ := c.query(pr)
		x, err := g.Explain(q)
		if err != nil {
			c.t.Fatalf("explaining %s: %v", pr, err)
		}
		pr.allowed = x.Verdict == calc.VerdictAllow
		want[i], xs[i] = pr, x
	}
	seen := map[string]bool{}
	var chains []string
	for _, x := range xs {
		for _, s := range x.Sides {
			for _, st := range s.Stages {
				if st.Chain == nil {
					continue
				}
				for _, t := range st.Chain.Tiers {
					for _, p := range t.Policies {
						ch := rules.PolicyChain(calc.PolicyID{Tier: p.Tier, Namespace: p.Namespace, Name: p.Name}, s.Direction == "ingress")
						if !seen[ch] {
							seen[ch] = true
							chains = append(chains, ch)
						}
					}
				}
			}
		}
	}
	c.waitChains(chains, true)
	deadline := time.Now().Add(5 * time.Second)
	pending := want
	for {
		got := make([]bool, len(pending))
		var wg sync.WaitGroup
		for i, pr := range pending {
			wg.Go(func() { got[i], _ = c.send(pr) })
		}
		wg.Wait()
		var bad []probe
		for i, pr := range pending {
			if got[i] != pr.allowed {
				bad = append(bad, pr)
			}
		}
		if len(bad) == 0 {
			return chains
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, pr := range bad {
				i := indexOf(want, pr)
				j, _ := json.MarshalIndent(xs[i], "", " ")
				fmt.Fprintf(&b, "\nthe explanation says %s, the kernel the opposite:\n%s\n", pr, j)
			}
			c.t.Fatalf("policies:\n%s%s", yaml, b.String())
		}
		pending = bad
		time.Sleep(50 * time.Millisecond)
	}
}

func indexOf(ps []probe, p probe) int {
	for i, q := range ps {
		if q == p {
			return i
		}
	}
	return -1
}
