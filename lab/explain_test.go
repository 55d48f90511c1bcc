package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/libcalico/apiconfig"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// This file checks `calicoctl policy explain` against the policy suites:
// for every cell of a case's matrix, the explanation (felix/calc's own
// evaluation, read from the lab's datastore) must say what the probes
// saw; and the rule an explanation names as the decider must be the one
// whose counter moves when a packet is sent.

// explainEnv makes the test binary the helper that explains queries.
const explainEnv = "PALISADE_LAB_EXPLAIN"

// explainJob is what the helper is asked: queries, and the indices of
// those to explain again the way calicoctl does (reading only what the
// query needs) to check it says the same as the whole cluster's read.
type explainJob struct {
	Queries  []calc.Query `json:"queries"`
	Targeted []int        `json:"targeted"`
}

// explainAnswer is the helper's answer: an explanation or an error per
// query, and the targeted explanations that differ.
type explainAnswer struct {
	Explanations []*calc.Explanation `json:"explanations"`
	Errors       []string            `json:"errors"`
	Differ       []string            `json:"differ,omitempty"`
}

// TestHelperExplain explains the queries of the job file named by
// PALISADE_LAB_EXPLAIN against the datastore its environment names (as
// calicoctl's) and writes the answer beside it; it does nothing in a
// normal test run.
func TestHelperExplain(t *testing.T) {
	jobFile := os.Getenv(explainEnv)
	if jobFile == "" {
		t.Skip("helper process for the policy tests' explanations")
	}
	b, err := os.ReadFile(jobFile)
	if err != nil {
		t.Fatal(err)
	}
	var job explainJob
	if err := json.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	cfg, err := apiconfig.Load(apiconfig.DefaultPath, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := etcdv3.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, hosts, err := calc.LoadCluster(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var ans explainAnswer
	for _, q := range job.Queries {
		q.Hosts = hosts
		x, err := g.Explain(q)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		ans.Explanations, ans.Errors = append(ans.Explanations, x), append(ans.Errors, msg)
	}
	for _, i := range job.Targeted {
		tg, tq, err := calc.LoadExplain(ctx, s, s.KV(), job.Queries[i])
		if err != nil {
			t.Fatal(err)
		}
		x, err := tg.Explain(tq)
		if err != nil {
			ans.Differ = append(ans.Differ, fmt.Sprintf("query %d: %v", i, err))
			continue
		}
		a, _ := json.Marshal(x)
		b, _ := json.Marshal(ans.Explanations[i])
		if !bytes.Equal(a, b) {
			ans.Differ = append(ans.Differ, fmt.Sprintf("query %d:\nreading what it needs: %s\nreading everything: %s", i, a, b))
		}
	}
	out, err := json.Marshal(ans)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jobFile+".answer", out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// explainAll runs the helper on node with queries.
func explainAll(t *testing.T, l *Lab, node string, job explainJob) explainAnswer {
	t.Helper()
	file := filepath.Join(t.TempDir(), "job.json")
	b, _ := json.Marshal(job)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cmd, err := l.Command(ctx, node, os.Args[0], "-test.run=^TestHelperExplain$", "-test.count=1")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, explainEnv+"="+file, "PALISADE_BIN="+binDir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := l.StartIn(node, cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("explaining: %v\n%s", err, out.String())
	}
	b, err = os.ReadFile(file + ".answer")
	if err != nil {
		t.Fatalf("the explain helper wrote no answer: %v\n%s", err, out.String())
	}
	var ans explainAnswer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatal(err)
	}
	return ans
}

// protoNumber is a matrix protocol's IP protocol number.
func protoNumber(proto string) uint8 {
	switch proto {
	case protoTCP:
		return 6
	case protoUDP:
		return 17
	case protoSCTP:
		return 132
	}
	return 0
}

// cellQuery is the explain question of a cell. Every other cell names
// its ends by address (found through IPAM, as calicoctl does), the rest
// by pod.
func cellQuery(g grid, k cell, n int, addr func(modelPod) netip.Addr) calc.Query {
	end := func(m modelPod) calc.End {
		if n%2 == 1 {
			return calc.End{Address: addr(m).String()}
		}
		return calc.End{Namespace: m.namespace, Name: m.name}
	}
	return calc.Query{From: end(g.pods[k.src]), To: end(g.pods[k.dst]), Protocol: protoNumber(k.proto), SrcPort: 40000, DstPort: uint16(k.port)}
}

// agreeWithExplain checks that the explanation of every cell of seen
// (what the probes observed) predicts it, and that explaining a sample of
// the cells the way calicoctl reads the datastore says the same. It
// returns the explanations, by cell.
func (pl *policyLab) agreeWithExplain(t *testing.T, seen grid) map[cell]*calc.Explanation {
	t.Helper()
	return agreeWithExplain(t, pl.l, seen, func(m modelPod) netip.Addr { return pl.pods[m.key()].IP })
}

// agreeWithExplain is policyLab.agreeWithExplain for any lab whose pods
// have the addresses addr gives.
func agreeWithExplain(t *testing.T, l *Lab, seen grid, addr func(modelPod) netip.Addr) map[cell]*calc.Explanation {
	t.Helper()
	cells := seen.cells()
	job := explainJob{}
	for i, k := range cells {
		job.Queries = append(job.Queries, cellQuery(seen, k, i, addr))
	}
	r := rand.New(rand.NewPCG(uint64(len(cells)), uint64(time.Now().UnixNano())))
	job.Targeted = append(job.Targeted, r.Perm(len(cells))[:min(8, len(cells))]...)
	slices.Sort(job.Targeted)
	began := time.Now()
	ans := explainAll(t, l, l.Nodes()[0].Name, job)
	for _, d := range ans.Differ {
		t.Errorf("the explanation from what a query needs differs from the one from the whole datastore: %s", d)
	}
	out := map[cell]*calc.Explanation{}
	bad := 0
	for i, k := range cells {
		x, msg := ans.Explanations[i], ans.Errors[i]
		if msg != "" {
			t.Errorf("explaining %s: %s", seen.name(k), msg)
			continue
		}
		out[k] = x
		if (x.Verdict == calc.VerdictAllow) != seen.ok[k] || x.Incomplete {
			bad++
			if bad <= 5 {
				b, _ := json.MarshalIndent(x, "", " ")
				t.Errorf("%s: the probes saw allowed=%v, the explanation says %s:\n%s", seen.name(k), seen.ok[k], x.Verdict, b)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d cells: the explanation does not predict the probes", bad, len(cells))
	} else {
		t.Logf("policy explain predicts all %d cells (%d explained again from a targeted read) in %s", len(cells), len(job.Targeted), time.Since(began).Round(time.Millisecond))
	}
	return out
}

// sideDecider returns the first side that decided a cell's verdict
// (the one that denied, or the destination's when both allowed) when a
// rule decided it.
func sideDecider(x *calc.Explanation) (calc.Side, bool) {
	sides := x.Sides
	for _, s := range sides {
		if s.Verdict == calc.VerdictDeny {
			return s, s.Decider != nil && s.Decider.Rule != nil
		}
	}
	if len(sides) == 0 {
		return calc.Side{}, false
	}
	s := sides[len(sides)-1]
	return s, s.Decider != nil && s.Decider.Rule != nil
}

// counterOf finds a rule's counter in an explanation from a node.
func counterOf(x *calc.Explanation, s calc.Side, ref calc.RuleRef) (uint64, bool) {
	for _, side := range x.Sides {
		if side.Direction != s.Direction || side.Node != s.Node {
			continue
		}
		for _, st := range side.Stages {
			if st.Chain == nil {
				continue
			}
			var pols []calc.PolicyResult
			for _, tr := range st.Chain.Tiers {
				pols = append(pols, tr.Policies...)
			}
			pols = append(pols, st.Chain.Profiles...)
			for _, p := range pols {
				if p.Kind != ref.Kind || p.Name != ref.Name || p.Namespace != ref.Namespace || p.Tier != ref.Tier {
					continue
				}
				for _, r := range p.Rules {
					if r.Index == ref.Index && r.Packets != nil {
						return *r.Packets, true
					}
				}
			}
		}
	}
	return 0, false
}

// explainAtNode runs `calicoctl policy explain --at-node` on node.
func (pl *policyLab) explainAtNode(t *testing.T, node string, g grid, k cell) *calc.Explanation {
	t.Helper()
	src, dst := pl.pods[g.pods[k.src].key()], pl.pods[g.pods[k.dst].key()]
	out, err := pl.l.Calicoctl(context.Background(), node, nil, "policy", "explain", "--at-node", node, "-o", "json",
		"--from", src.Key(), "--to", dst.IP.String(), "--protocol", strings.ToLower(k.proto), "--port", fmt.Sprint(k.port))
	if err != nil {
		t.Fatalf("explain at %s: %v", node, err)
	}
	var x calc.Explanation
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatalf("explain at %s: %v\n%s", node, err, out)
	}
	return &x
}

// checkDeciderCounters takes, among the cells a rule decided, one allowed
// and one denied; for each it asks the deciding side's node (calicoctl
// policy explain --at-node), sends one probe, asks again, and checks
// that the deciding rule's counter moved while the rules the explanation
// says did not match kept theirs, and that the node's live explanation
// says what the datastore's does.
func (pl *policyLab) checkDeciderCounters(t *testing.T, seen grid, xs map[cell]*calc.Explanation) {
	t.Helper()
	var picked []cell
	for _, allowed := range []bool{true, false} {
		for _, k := range seen.cells() {
			x := xs[k]
			if x == nil || (x.Verdict == calc.VerdictAllow) != allowed {
				continue
			}
			if _, ok := sideDecider(x); ok {
				picked = append(picked, k)
				break
			}
		}
	}
	if len(picked) == 0 {
		t.Logf("no cell of this case was decided by a rule: no counter to check")
		return
	}
	ctx := context.Background()
	for _, k := range picked {
		x := xs[k]
		side, _ := sideDecider(x)
		before := pl.explainAtNode(t, side.Node, seen, k)
		if before.Verdict != x.Verdict || before.Node != side.Node {
			t.Errorf("%s: calico-node on %s says %s, the datastore's explanation %s", seen.name(k), side.Node, before.Verdict, x.Verdict)
		}
		ref := *side.Decider.Rule
		n0, ok := counterOf(before, side, ref)
		if !ok {
			t.Fatalf("%s: calico-node on %s gives no counter for the deciding %s rule %d of %s", seen.name(k), side.Node, ref.Direction, ref.Index, ref.Name)
		}
		src, dst := pl.pods[seen.pods[k.src].key()], pl.pods[seen.pods[k.dst].key()]
		err := probe(ctx, pl.l, src.Key(), src.IP, pl.servers[dst.Key()], dst.IP, k.proto, k.port)
		if (err == nil) != seen.ok[k] {
			t.Fatalf("%s: the probe now says allowed=%v (%v)", seen.name(k), err == nil, err)
		}
		after := pl.explainAtNode(t, side.Node, seen, k)
		n1, _ := counterOf(after, side, ref)
		if n1 <= n0 {
			t.Errorf("%s: the deciding rule %d (%s) of %s %s did not count the probe: %d packets before, %d after", seen.name(k), ref.Index, ref.Direction, ref.Kind, ref.Name, n0, n1)
		} else {
			t.Logf("%s: %s rule %d of %s counted %d packets of the probe", seen.name(k), ref.Direction, ref.Index, ref.Name, n1-n0)
		}
		// policy stats says the same of the rule.
		name := ref.Name
		if ref.Namespace != "" {
			name = ref.Namespace + "/" + ref.Name
		}
		out, err := pl.l.Calicoctl(ctx, side.Node, nil, "policy", "stats", "--node", side.Node, "-o", "json", name)
		if err != nil {
			t.Fatalf("policy stats: %v", err)
		}
		var cs []calc.RuleCounter
		if err := json.Unmarshal([]byte(out), &cs); err != nil {
			t.Fatalf("policy stats: %v\n%s", err, out)
		}
		if i := slices.IndexFunc(cs, func(c calc.RuleCounter) bool { return c.RuleRef == ref }); i < 0 || cs[i].Packets != n1 {
			t.Errorf("%s: policy stats on %s gives %+v for the deciding rule, explain %d packets", seen.name(k), side.Node, cs, n1)
		}
		// The rules before it that did not match counted nothing.
		for _, s := range before.Sides {
			if s.Node != side.Node || s.Direction != side.Direction {
				continue
			}
			eachTried(s, func(rr calc.RuleRef, r calc.RuleResult) {
				if r.Matched || r.Packets == nil {
					return
				}
				if m, _ := counterOf(after, side, rr); m != *r.Packets {
					t.Errorf("%s: %s rule %d of %s did not match, but counted %d packets", seen.name(k), rr.Direction, rr.Index, rr.Name, m-*r.Packets)
				}
			})
		}
	}
}

// eachTried calls fn with every rule a side tried.
func eachTried(s calc.Side, fn func(calc.RuleRef, calc.RuleResult)) {
	for _, st := range s.Stages {
		if st.Chain == nil {
			continue
		}
		var pols []calc.PolicyResult
		for _, tr := range st.Chain.Tiers {
			pols = append(pols, tr.Policies...)
		}
		pols = append(pols, st.Chain.Profiles...)
		for _, p := range pols {
			for _, r := range p.Rules {
				fn(calc.RuleRef{Kind: p.Kind, Tier: p.Tier, Namespace: p.Namespace, Name: p.Name, Direction: s.Direction, Index: r.Index}, r)
			}
		}
	}
}
