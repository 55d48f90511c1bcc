package lab

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// This file is the Kubernetes side of the policy tests: NetworkPolicy
// intent as the upstream network-policy e2e model states it (union of
// what the policies selecting a pod allow; pod and namespace selectors
// with match expressions; ipBlock with except; ports by number, range or
// name), evaluated by plain matching into the reachability each probe
// should see, and rendered into networking.k8s.io/v1 YAML for kubectl.
// The model never looks at what Palisade makes of the YAML.

// ksel is a label selector: matchLabels and matchExpressions.
type ksel struct {
	match labels
	exprs []kexpr
}

// kexpr is one match expression (In, NotIn, Exists, DoesNotExist).
type kexpr struct {
	key, op string
	values  []string
}

func sel(l labels, exprs ...kexpr) *ksel { return &ksel{match: l, exprs: exprs} }

func (s *ksel) matches(l labels) bool {
	if !s.match.matches(l) {
		return false
	}
	for _, e := range s.exprs {
		v, has := l[e.key]
		switch e.op {
		case "In":
			if !has || !slices.Contains(e.values, v) {
				return false
			}
		case "NotIn":
			if has && slices.Contains(e.values, v) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		}
	}
	return true
}

// kpeer is a NetworkPolicyPeer: pods and namespaces selectors (nil: not
// given), or an ipBlock.
type kpeer struct {
	pods, namespaces *ksel
	cidr             string
	except           []string
}

// kport is a NetworkPolicyPort: a protocol ("" is TCP, the API's
// default), a number (0: every port), an end of range, or a name.
type kport struct {
	proto string
	num   int
	end   int
	name  string
}

// krule is an ingress or egress rule: nil peers or ports match all.
type krule struct {
	peers []kpeer
	ports []kport
}

// knp is a NetworkPolicy's intent. types nil means the default (Ingress,
// plus Egress when egress rules are given).
type knp struct {
	name, namespace string
	pods            *ksel
	types           []string
	ingress, egress []krule
}

// kpod is a pod as the model sees it.
type kpod struct {
	namespace, name string
	labels          labels
	ip              netip.Addr
	// ports are its named ports: name → protocol/number.
	ports map[string]kport
}

func (p kpod) key() string { return p.namespace + "/" + p.name }

// kcluster is the state the model evaluates: namespaces' labels
// (kubernetes.io/metadata.name included) and the policies.
type kcluster struct {
	nsLabels map[string]labels
	policies []knp
}

func (p knp) types2() (ingress, egress bool) {
	if p.types == nil {
		return true, len(p.egress) > 0
	}
	return slices.Contains(p.types, "Ingress"), slices.Contains(p.types, "Egress")
}

// allowed: the source's egress and the destination's ingress must both
// allow.
func (c kcluster) allowed(src, dst kpod, proto string, port int) bool {
	return c.admits(src, dst, dst, proto, port, false) && c.admits(dst, src, dst, proto, port, true)
}

// admits: no policy of subject's direction selecting it allows all;
// otherwise one rule of one of them must match the other end. server is
// the pod whose named ports resolve port names.
func (c kcluster) admits(subject, other, server kpod, proto string, port int, ingress bool) bool {
	isolated := false
	for _, p := range c.policies {
		if p.namespace != subject.namespace || !p.pods.matches(subject.labels) {
			continue
		}
		in, eg := p.types2()
		rules := p.egress
		if ingress {
			if !in {
				continue
			}
			rules = p.ingress
		} else if !eg {
			continue
		}
		isolated = true
		for _, r := range rules {
			if c.ruleMatches(p, r, other, server, proto, port) {
				return true
			}
		}
	}
	return !isolated
}

func (c kcluster) ruleMatches(p knp, r krule, other, server kpod, proto string, port int) bool {
	peerOK := len(r.peers) == 0
	for _, pr := range r.peers {
		if c.peerMatches(p, pr, other) {
			peerOK = true
			break
		}
	}
	portOK := len(r.ports) == 0
	for _, pt := range r.ports {
		want := pt.proto
		if want == "" {
			want = protoTCP
		}
		if want != proto {
			continue
		}
		switch {
		case pt.name != "":
			if np, ok := server.ports[pt.name]; ok && np.proto == proto && np.num == port {
				portOK = true
			}
		case pt.num == 0:
			portOK = true
		case pt.end != 0:
			portOK = portOK || (port >= pt.num && port <= pt.end)
		default:
			portOK = portOK || port == pt.num
		}
	}
	return peerOK && portOK
}

func (c kcluster) peerMatches(p knp, pr kpeer, other kpod) bool {
	if pr.cidr != "" {
		if !netip.MustParsePrefix(pr.cidr).Contains(other.ip) {
			return false
		}
		for _, e := range pr.except {
			if netip.MustParsePrefix(e).Contains(other.ip) {
				return false
			}
		}
		return true
	}
	nsOK := other.namespace == p.namespace
	if pr.namespaces != nil {
		nsOK = pr.namespaces.matches(c.nsLabels[other.namespace])
	}
	return nsOK && (pr.pods == nil || pr.pods.matches(other.labels))
}

// object renders the intent as a NetworkPolicy.
func (p knp) object() *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{}
	np.APIVersion, np.Kind = "networking.k8s.io/v1", "NetworkPolicy"
	np.Name, np.Namespace = p.name, p.namespace
	np.Spec.PodSelector = *p.pods.object()
	for _, t := range p.types {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyType(t))
	}
	for _, r := range p.ingress {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: peersOf(r.peers), Ports: portsOf(r.ports)})
	}
	for _, r := range p.egress {
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: peersOf(r.peers), Ports: portsOf(r.ports)})
	}
	return np
}

// yaml renders the policy for kubectl.
func (p knp) yaml() string {
	b, err := yaml.Marshal(p.object())
	if err != nil {
		panic(err)
	}
	return string(b)
}

// knpYAML joins policies into one multi-document YAML.
func knpYAML(ps []knp) string {
	var docs []string
	for _, p := range ps {
		docs = append(docs, p.yaml())
	}
	return strings.Join(docs, "---\n")
}

// TestKubeModel checks the Kubernetes model against cells worked out by
// hand (upstream e2e cases) and that every policy it renders is a valid
// NetworkPolicy document.
func TestKubeModel(t *testing.T) {
	named := map[string]kport{"serve-80-tcp": {proto: protoTCP, num: 80}, "serve-81-udp": {proto: protoUDP, num: 81}}
	xa := kpod{"x", "a", labels{"pod": "a"}, netip.MustParseAddr("10.244.1.1"), named}
	xb := kpod{"x", "b", labels{"pod": "b"}, netip.MustParseAddr("10.244.1.2"), named}
	yb := kpod{"y", "b", labels{"pod": "b"}, netip.MustParseAddr("10.244.2.2"), named}
	ns := map[string]labels{"x": {"ns": "x", "kubernetes.io/metadata.name": "x"}, "y": {"ns": "y", "kubernetes.io/metadata.name": "y"}}
	all := sel(nil)
	tests := []struct {
		name     string
		pols     []knp
		src, dst kpod
		proto    string
		port     int
		want     bool
	}{
		{"default deny ingress", []knp{{name: "d", namespace: "x", pods: all, types: []string{"Ingress"}}}, yb, xa, protoTCP, 80, false},
		{"deny ingress leaves egress", []knp{{name: "d", namespace: "x", pods: all, types: []string{"Ingress"}}}, xa, yb, protoTCP, 80, true},
		{"pod selector stays in namespace", []knp{{name: "p", namespace: "x", pods: all, ingress: []krule{{peers: []kpeer{{pods: sel(labels{"pod": "b"})}}}}}}, yb, xa, protoTCP, 80, false},
		{"pod selector in namespace", []knp{{name: "p", namespace: "x", pods: all, ingress: []krule{{peers: []kpeer{{pods: sel(labels{"pod": "b"})}}}}}}, xb, xa, protoTCP, 80, true},
		{"namespace expression", []knp{{name: "p", namespace: "x", pods: all, ingress: []krule{{peers: []kpeer{{namespaces: sel(nil, kexpr{"ns", "In", []string{"y"}})}}}}}}, yb, xa, protoUDP, 81, true},
		{"union of policies", []knp{{name: "p80", namespace: "x", pods: all, ingress: []krule{{ports: []kport{{num: 80}}}}},
			{name: "p81", namespace: "x", pods: all, ingress: []krule{{ports: []kport{{num: 81}}}}}}, yb, xa, protoTCP, 81, true},
		{"port default protocol is TCP", []knp{{name: "p", namespace: "x", pods: all, ingress: []krule{{ports: []kport{{num: 80}}}}}}, yb, xa, protoUDP, 80, false},
		{"named port", []knp{{name: "p", namespace: "x", pods: all, ingress: []krule{{ports: []kport{{proto: protoUDP, name: "serve-81-udp"}}}}}}, yb, xa, protoUDP, 81, true},
		{"named port of another protocol", []knp{{name: "p", namespace: "x", pods: all, ingress: []krule{{ports: []kport{{name: "serve-80-tcp"}}}}}}, yb, xa, protoTCP, 81, false},
		{"end port", []knp{{name: "p", namespace: "x", pods: all, ingress: []krule{{ports: []kport{{num: 79, end: 81}}}}}}, yb, xa, protoTCP, 81, true},
		{"ipBlock except", []knp{{name: "p", namespace: "y", pods: all, types: []string{"Egress"},
			egress: []krule{{peers: []kpeer{{cidr: "10.244.0.0/16", except: []string{"10.244.1.1/32"}}}}}}}, yb, xa, protoTCP, 80, false},
		{"ipBlock", []knp{{name: "p", namespace: "y", pods: all, types: []string{"Egress"},
			egress: []krule{{peers: []kpeer{{cidr: "10.244.0.0/16", except: []string{"10.244.1.1/32"}}}}}}}, yb, xb, protoTCP, 80, true},
		{"implied egress type", []knp{{name: "p", namespace: "y", pods: all, egress: []krule{{ports: []kport{{num: 81}}}}}}, yb, xa, protoTCP, 80, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := kcluster{nsLabels: ns, policies: tc.pols}
			if got := c.allowed(tc.src, tc.dst, tc.proto, tc.port); got != tc.want {
				t.Errorf("%s → %s %s/%d: allowed=%v, want %v", tc.src.key(), tc.dst.key(), tc.proto, tc.port, got, tc.want)
			}
			for _, p := range tc.pols {
				var np networkingv1.NetworkPolicy
				if err := yaml.UnmarshalStrict([]byte(p.yaml()), &np); err != nil {
					t.Errorf("%s: %v\n%s", p.name, err, p.yaml())
				}
			}
		})
	}
}
