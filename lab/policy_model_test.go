package lab

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// This file is the policy tests' model: policy intent in the terms of a
// Kubernetes NetworkPolicy (who selects whom, which peers and ports a rule
// matches) plus Calico's order, Deny action and GlobalNetworkPolicy,
// evaluated by plain map matching into the reachability each probe should
// see, and rendered into the Calico YAML the lab applies. The model never
// looks at the YAML: the two meet only in the kernel.

// Protocols a cell of the matrix is probed with.
const (
	protoTCP  = "TCP"
	protoUDP  = "UDP"
	protoSCTP = "SCTP"
)

// labels are a pod's or a namespace's labels, and a selector's matchLabels
// (every key equal; empty matches everything).
type labels map[string]string

func (s labels) matches(l labels) bool {
	for k, v := range s {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// calico renders matchLabels as a Calico selector.
func (s labels) calico() string {
	if len(s) == 0 {
		return "all()"
	}
	var terms []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		terms = append(terms, fmt.Sprintf("%s == '%s'", k, s[k]))
	}
	return strings.Join(terms, " && ")
}

// peer is a NetworkPolicyPeer: pods matching pods (nil: any pod) in
// namespaces matching namespaces (nil: the policy's own namespace, or any
// namespace for a global policy). Both nil: anything.
type peer struct {
	pods, namespaces labels
}

// port is a NetworkPolicyPort: a protocol and a port (0: every port).
type port struct {
	proto string
	num   int
}

// rule matches traffic from (ingress) or to (egress) any of its peers
// (none: everyone) on any of its ports (none: every port and protocol);
// its action (Allow unless deny) decides what matches.
type rule struct {
	peers []peer
	ports []port
	deny  bool
}

// netpol is a policy's intent: a Kubernetes NetworkPolicy's, with Calico's
// order and, when global, a GlobalNetworkPolicy's reach.
type netpol struct {
	name, namespace string
	// pods is the podSelector (empty: every pod of the namespace).
	pods labels
	// global makes a GlobalNetworkPolicy: pods of any namespace whose
	// labels match namespaces (nil: every namespace).
	global     bool
	namespaces labels
	// order places it among the policies (nil: after those with one;
	// then by name).
	order *float64
	// ingress and egress say which directions the policy applies to
	// (policyTypes); the first of their rules that matches decides.
	ingress, egress bool
	in, out         []rule
}

// selects says whether the policy applies to pod.
func (p netpol) selects(c cluster, pod modelPod) bool {
	if p.global {
		return (p.namespaces == nil || p.namespaces.matches(c.nsLabels[pod.namespace])) && p.pods.matches(pod.labels)
	}
	return p.namespace == pod.namespace && p.pods.matches(pod.labels)
}

// before orders policies as Calico does within a tier.
func (p netpol) before(q netpol) bool {
	switch {
	case p.order != nil && q.order != nil && *p.order != *q.order:
		return *p.order < *q.order
	case (p.order == nil) != (q.order == nil):
		return p.order != nil
	}
	return p.name < q.name
}

// modelPod is a pod as the model sees it.
type modelPod struct {
	namespace, name string
	labels          labels
}

func (p modelPod) key() string { return p.namespace + "/" + p.name }

// cluster is the state the model evaluates beside the pods themselves:
// namespace labels and the policies in force.
type cluster struct {
	nsLabels map[string]labels
	policies []netpol
}

// allowed says whether a packet from src to dst on proto/port gets
// through: src's egress and dst's ingress must both let it.
func (c cluster) allowed(src, dst modelPod, proto string, num int) bool {
	return c.admits(src, dst, proto, num, false) && c.admits(dst, src, proto, num, true)
}

// admits evaluates one direction for subject: with no policy applying, the
// profile allows; otherwise the policies in order, the first rule that
// matches other deciding, and nothing matched denies. With Allow rules
// only this is Kubernetes' union of what the policies admit.
func (c cluster) admits(subject, other modelPod, proto string, num int, ingress bool) bool {
	var apply []netpol
	for _, p := range c.policies {
		if p.selects(c, subject) && (ingress && p.ingress || !ingress && p.egress) {
			apply = append(apply, p)
		}
	}
	slices.SortFunc(apply, func(p, q netpol) int {
		if p.before(q) {
			return -1
		}
		if q.before(p) {
			return 1
		}
		return 0
	})
	for _, p := range apply {
		rules := p.out
		if ingress {
			rules = p.in
		}
		for _, r := range rules {
			if c.ruleMatches(p, r, other, proto, num) {
				return !r.deny
			}
		}
	}
	return len(apply) == 0
}

func (c cluster) ruleMatches(p netpol, r rule, other modelPod, proto string, num int) bool {
	peerOK := len(r.peers) == 0
	for _, pr := range r.peers {
		var nsOK bool
		switch {
		case pr.namespaces != nil:
			nsOK = pr.namespaces.matches(c.nsLabels[other.namespace])
		case pr.pods == nil || p.global:
			nsOK = true
		default:
			nsOK = other.namespace == p.namespace
		}
		if nsOK && (pr.pods == nil || pr.pods.matches(other.labels)) {
			peerOK = true
			break
		}
	}
	portOK := len(r.ports) == 0
	for _, pt := range r.ports {
		if pt.proto == proto && (pt.num == 0 || pt.num == num) {
			portOK = true
			break
		}
	}
	return peerOK && portOK
}

// yaml renders the policy as a Calico NetworkPolicy (GlobalNetworkPolicy
// when global): each (peer, port) pair of a rule becomes a rule with its
// action; a peer's podSelector becomes the rule's selector (scoped to the
// policy's namespace unless a namespaceSelector is given).
func (p netpol) yaml() string {
	var b strings.Builder
	if p.global {
		fmt.Fprintf(&b, "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n  name: %q\nspec:\n", p.name)
		if p.namespaces != nil {
			fmt.Fprintf(&b, "  namespaceSelector: %q\n", p.namespaces.calico())
		}
	} else {
		fmt.Fprintf(&b, "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata:\n  name: %q\n  namespace: %q\nspec:\n", p.name, p.namespace)
	}
	if p.order != nil {
		fmt.Fprintf(&b, "  order: %g\n", *p.order)
	}
	fmt.Fprintf(&b, "  selector: %q\n  types:\n", p.pods.calico())
	if p.ingress {
		b.WriteString("  - Ingress\n")
	}
	if p.egress {
		b.WriteString("  - Egress\n")
	}
	section := func(name, side string, rules []rule) {
		fmt.Fprintf(&b, "  %s:", name)
		if len(rules) == 0 {
			b.WriteString(" []\n")
			return
		}
		b.WriteString("\n")
		for _, r := range rules {
			peers := r.peers
			if len(peers) == 0 {
				peers = []peer{{}}
			}
			ports := r.ports
			if len(ports) == 0 {
				ports = []port{{}}
			}
			for _, pr := range peers {
				for _, pt := range ports {
					if r.deny {
						b.WriteString("  - action: Deny\n")
					} else {
						b.WriteString("  - action: Allow\n")
					}
					if pt.proto != "" {
						fmt.Fprintf(&b, "    protocol: %s\n", pt.proto)
					}
					// The peer goes to the source (ingress) or the
					// destination (egress); ports always to the destination.
					fields := map[string][]string{}
					if pr.pods != nil {
						fields[side] = append(fields[side], fmt.Sprintf("      selector: %q\n", pr.pods.calico()))
					}
					if pr.namespaces != nil {
						fields[side] = append(fields[side], fmt.Sprintf("      namespaceSelector: %q\n", pr.namespaces.calico()))
					}
					if pt.num != 0 {
						fields["destination"] = append(fields["destination"], fmt.Sprintf("      ports: [%d]\n", pt.num))
					}
					for _, f := range []string{"source", "destination"} {
						if len(fields[f]) > 0 {
							fmt.Fprintf(&b, "    %s:\n%s", f, strings.Join(fields[f], ""))
						}
					}
				}
			}
		}
	}
	if p.ingress {
		section("ingress", "source", p.in)
	}
	if p.egress {
		section("egress", "destination", p.out)
	}
	return b.String()
}

// policiesYAML joins policies into one multi-document YAML.
func policiesYAML(ps []netpol) string {
	var docs []string
	for _, p := range ps {
		docs = append(docs, p.yaml())
	}
	return strings.Join(docs, "---\n")
}

// namespaceProfilesYAML renders the kns.<namespace> Profiles that carry
// namespace labels, as Calico's kube-controllers writes them: the labels
// under labelsToApply with the pcns. prefix, namespaceSelector's view.
func namespaceProfilesYAML(nsLabels map[string]labels) string {
	var docs []string
	for _, ns := range slices.Sorted(maps.Keys(nsLabels)) {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: projectcalico.org/v3\nkind: Profile\nmetadata:\n  name: \"kns.%s\"\nspec:\n  labelsToApply:\n", ns)
		fmt.Fprintf(&b, "    pcns.projectcalico.org/name: %q\n", ns)
		for _, k := range slices.Sorted(maps.Keys(nsLabels[ns])) {
			fmt.Fprintf(&b, "    pcns.%s: %q\n", k, nsLabels[ns][k])
		}
		docs = append(docs, b.String())
	}
	return strings.Join(docs, "---\n")
}

// cell is one probe: from pod src to pod dst (indices into the matrix's
// pods) on proto/port.
type cell struct {
	src, dst int
	proto    string
	port     int
}

// grid is a reachability matrix over pods, protocols and ports; self
// traffic (which never leaves the pod) is not probed.
type grid struct {
	pods   []modelPod
	protos []string
	ports  []int
	// ok holds the cells that got (or should get) through.
	ok map[cell]bool
}

func newGrid(pods []modelPod, protos []string, ports []int) grid {
	return grid{pods: pods, protos: protos, ports: ports, ok: map[cell]bool{}}
}

// cells lists every probed cell in a fixed order.
func (g grid) cells() []cell {
	var out []cell
	for _, proto := range g.protos {
		for _, num := range g.ports {
			for i := range g.pods {
				for j := range g.pods {
					if i != j {
						out = append(out, cell{i, j, proto, num})
					}
				}
			}
		}
	}
	return out
}

// expect fills the grid from the model.
func (g grid) expect(c cluster) grid {
	for _, k := range g.cells() {
		g.ok[k] = c.allowed(g.pods[k.src], g.pods[k.dst], k.proto, k.port)
	}
	return g
}

// counts says how many cells are allowed and blocked.
func (g grid) counts() (allowed, blocked int) {
	for _, k := range g.cells() {
		if g.ok[k] {
			allowed++
		} else {
			blocked++
		}
	}
	return allowed, blocked
}

// find is the cell from pod key src to pod key dst.
func (g grid) find(src, dst, proto string, num int) (cell, bool) {
	i := slices.IndexFunc(g.pods, func(p modelPod) bool { return p.key() == src })
	j := slices.IndexFunc(g.pods, func(p modelPod) bool { return p.key() == dst })
	return cell{i, j, proto, num}, i >= 0 && j >= 0 && i != j
}

// mismatches lists the cells where got differs from want.
func mismatches(want, got grid, cells []cell) []cell {
	var out []cell
	for _, k := range cells {
		if want.ok[k] != got.ok[k] {
			out = append(out, k)
		}
	}
	return out
}

// printDiff writes, for each protocol and port with a difference, the
// matrix of sources (rows) to destinations (columns): "." allowed as
// expected, "x" blocked as expected, "+" allowed but should be blocked,
// "-" blocked but should be allowed, "\" self.
func printDiff(w io.Writer, want, got grid) {
	width := 0
	for _, p := range want.pods {
		width = max(width, len(p.key()))
	}
	fmt.Fprintln(w, `legend: "." allowed, "x" blocked (both as expected); "+" allowed but should be blocked; "-" blocked but should be allowed`)
	for _, proto := range want.protos {
		for _, num := range want.ports {
			bad := 0
			for i := range want.pods {
				for j := range want.pods {
					if k := (cell{i, j, proto, num}); i != j && want.ok[k] != got.ok[k] {
						bad++
					}
				}
			}
			if bad == 0 {
				continue
			}
			fmt.Fprintf(w, "%s/%d: %d cells differ\n%*s ", proto, num, bad, width, "from\\to")
			for j := range want.pods {
				fmt.Fprintf(w, " %d", j%10)
			}
			fmt.Fprintln(w)
			for i, p := range want.pods {
				fmt.Fprintf(w, "%*s ", width, p.key())
				for j := range want.pods {
					k := cell{i, j, proto, num}
					var c string
					switch {
					case i == j:
						c = `\`
					case want.ok[k] && got.ok[k]:
						c = "."
					case !want.ok[k] && !got.ok[k]:
						c = "x"
					case got.ok[k]:
						c = "+"
					default:
						c = "-"
					}
					fmt.Fprintf(w, " %s", c)
				}
				fmt.Fprintf(w, "  %d\n", i%10)
			}
		}
	}
}

// name is a cell in words.
func (g grid) name(k cell) string {
	return fmt.Sprintf("%s→%s %s/%d", g.pods[k.src].key(), g.pods[k.dst].key(), k.proto, k.port)
}

// TestPolicyModel checks the model against cells worked out by hand and
// that every policy it renders decodes and validates as Calico's.
func TestPolicyModel(t *testing.T) {
	xa := modelPod{"x", "a", labels{"pod": "a"}}
	xb := modelPod{"x", "b", labels{"pod": "b", "tier": "gw"}}
	yb := modelPod{"y", "b", labels{"pod": "b", "tier": "gw"}}
	ns := map[string]labels{"x": {"ns": "x"}, "y": {"ns": "y"}}
	tests := []struct {
		name     string
		pol      netpol
		src, dst modelPod
		proto    string
		port     int
		want     bool
	}{
		{"ingress isolation without rules", netpol{name: "p", namespace: "x", pods: labels{}, ingress: true}, yb, xa, protoTCP, 80, false},
		{"policy of another namespace", netpol{name: "p", namespace: "y", pods: labels{}, ingress: true}, xb, xa, protoTCP, 80, true},
		{"podSelector peer stays in its namespace", netpol{name: "p", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{pods: labels{"tier": "gw"}}}}}}, yb, xa, protoTCP, 80, false},
		{"podSelector peer in its namespace", netpol{name: "p", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{pods: labels{"tier": "gw"}}}}}}, xb, xa, protoUDP, 81, true},
		{"namespaceSelector and podSelector together", netpol{name: "p", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{pods: labels{"pod": "b"}, namespaces: labels{"ns": "y"}}}}}}, yb, xa, protoSCTP, 80, true},
		{"port of another protocol", netpol{name: "p", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{ports: []port{{protoUDP, 80}}}}}, yb, xa, protoTCP, 80, false},
		{"egress isolation of the source", netpol{name: "p", namespace: "y", pods: labels{"pod": "b"}, egress: true}, yb, xa, protoTCP, 80, false},
		{"egress policy does not isolate ingress", netpol{name: "p", namespace: "x", pods: labels{}, egress: true}, yb, xa, protoTCP, 80, true},
		{"egress to a peer on a port", netpol{name: "p", namespace: "y", pods: labels{"pod": "b"}, egress: true,
			out: []rule{{peers: []peer{{pods: labels{"pod": "a"}, namespaces: labels{"ns": "x"}}}, ports: []port{{protoTCP, 80}}}}}, yb, xa, protoTCP, 80, true},
		{"egress to a peer on another port", netpol{name: "p", namespace: "y", pods: labels{"pod": "b"}, egress: true,
			out: []rule{{peers: []peer{{pods: labels{"pod": "a"}, namespaces: labels{"ns": "x"}}}, ports: []port{{protoTCP, 80}}}}}, yb, xa, protoTCP, 81, false},
		{"a Deny first decides", netpol{name: "p", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{namespaces: labels{"ns": "y"}}}, deny: true}, {}}}, yb, xa, protoTCP, 80, false},
		{"a rule that does not match passes to the next", netpol{name: "p", namespace: "x", pods: labels{}, ingress: true,
			in: []rule{{peers: []peer{{namespaces: labels{"ns": "y"}}}, ports: []port{{protoUDP, 0}}, deny: true}, {}}}, yb, xa, protoTCP, 80, true},
		{"global policy selects across namespaces", netpol{name: "g", global: true, namespaces: labels{"ns": "x"}, pods: labels{}, ingress: true}, yb, xa, protoTCP, 80, false},
		{"global policy's namespaceSelector", netpol{name: "g", global: true, namespaces: labels{"ns": "y"}, pods: labels{}, ingress: true}, yb, xa, protoTCP, 80, true},
		{"global policy's peer selector is not scoped", netpol{name: "g", global: true, pods: labels{"pod": "a"}, ingress: true,
			in: []rule{{peers: []peer{{pods: labels{"tier": "gw"}}}}}}, yb, xa, protoTCP, 80, true},
		{"pod not selected", netpol{name: "p", namespace: "x", pods: labels{"pod": "b"}, ingress: true}, yb, xa, protoTCP, 80, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster{nsLabels: ns, policies: []netpol{tc.pol}}
			if got := c.allowed(tc.src, tc.dst, tc.proto, tc.port); got != tc.want {
				t.Errorf("%s → %s %s/%d: allowed=%v, want %v", tc.src.key(), tc.dst.key(), tc.proto, tc.port, got, tc.want)
			}
			rs, err := v3.Decode([]byte(tc.pol.yaml()))
			if err != nil || len(rs) != 1 {
				t.Fatalf("policy %s/%s: decoding %d resources: %v\n%s", tc.pol.namespace, tc.pol.name, len(rs), err, tc.pol.yaml())
			}
			v3.Default(rs[0])
			if err := v3.Validate(rs[0]); err != nil {
				t.Errorf("%v\n%s", err, tc.pol.yaml())
			}
			var got []string
			switch r := rs[0].(type) {
			case *v3.NetworkPolicy:
				got = decodedRules(r.Spec.Ingress, r.Spec.Egress)
			case *v3.GlobalNetworkPolicy:
				got = decodedRules(r.Spec.Ingress, r.Spec.Egress)
			default:
				t.Fatalf("decoded a %T", rs[0])
			}
			if want := intendedRules(tc.pol); !slices.Equal(got, want) {
				t.Errorf("rendered rules %q, want %q\n%s", got, want, tc.pol.yaml())
			}
		})
	}
	if err := validate(policiesYAML([]netpol{{name: "q", namespace: "y", pods: labels{}, egress: true,
		out: []rule{{peers: []peer{{pods: labels{"pod": "b"}, namespaces: labels{"ns": "y"}}}, ports: []port{{protoUDP, 80}, {protoSCTP, 0}}}}}})); err != nil {
		t.Error(err)
	}
	rs, err := v3.Decode([]byte(namespaceProfilesYAML(ns)))
	if err != nil || len(rs) != 2 {
		t.Fatalf("namespace profiles: %d resources: %v", len(rs), err)
	}
	for _, r := range rs {
		v3.Default(r)
		if err := v3.Validate(r); err != nil {
			t.Error(err)
		}
	}
}

// intendedRules flattens a policy's intent into one line per Calico rule
// it should render to: direction, protocol, peer selectors, port.
func intendedRules(p netpol) []string {
	var out []string
	add := func(dir string, rules []rule) {
		for _, r := range rules {
			peers, ports := r.peers, r.ports
			if len(peers) == 0 {
				peers = []peer{{}}
			}
			if len(ports) == 0 {
				ports = []port{{}}
			}
			for _, pr := range peers {
				for _, pt := range ports {
					sel, nsSel := "", ""
					if pr.pods != nil {
						sel = pr.pods.calico()
					}
					if pr.namespaces != nil {
						nsSel = pr.namespaces.calico()
					}
					action := "Allow"
					if r.deny {
						action = "Deny"
					}
					out = append(out, fmt.Sprintf("%s %s %s sel=%s ns=%s port=%d", dir, action, pt.proto, sel, nsSel, pt.num))
				}
			}
		}
	}
	add("in", p.in)
	add("out", p.out)
	return out
}

// decodedRules flattens a decoded Calico policy's rules the same way.
func decodedRules(ingress, egress []v3.Rule) []string {
	var out []string
	add := func(dir string, rules []v3.Rule, peerOf func(v3.Rule) v3.EntityRule) {
		for _, r := range rules {
			proto := ""
			if r.Protocol != nil {
				proto = r.Protocol.String()
			}
			num := 0
			if len(r.Destination.Ports) == 1 {
				num = int(r.Destination.Ports[0].MinPort)
			}
			pe := peerOf(r)
			out = append(out, fmt.Sprintf("%s %s %s sel=%s ns=%s port=%d", dir, r.Action, proto, pe.Selector, pe.NamespaceSelector, num))
		}
	}
	add("in", ingress, func(r v3.Rule) v3.EntityRule { return r.Source })
	add("out", egress, func(r v3.Rule) v3.EntityRule { return r.Destination })
	return out
}

// validate decodes, defaults and validates YAML documents.
func validate(yaml string) error {
	rs, err := v3.Decode([]byte(yaml))
	if err != nil {
		return err
	}
	for _, r := range rs {
		v3.Default(r)
		if err := v3.Validate(r); err != nil {
			return err
		}
	}
	return nil
}
