package scale

import (
	"fmt"
	"net/netip"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// Cluster describes the simulated cluster a measurement builds: Nodes
// nodes with PodsPerNode pods each, spread over Namespaces namespaces,
// and Policies NetworkPolicies spread evenly over the namespaces.
type Cluster struct {
	Nodes, PodsPerNode, Namespaces, Policies int
}

// Policy labels: pods carry app=app-<0..appValues-1> and
// role=role-<0..roleValues-1>; policy k of a namespace selects one app and
// allows from one role, so each namespace has several distinct rule
// selectors (IP sets) as real namespaces do.
const (
	appValues  = 10
	roleValues = 5
)

// NodeName is the name of node i.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// NamespaceName is the name of namespace i.
func NamespaceName(i int) string { return fmt.Sprintf("ns-%d", i) }

// podAddr is the address of pod j of node i: node i owns the /26 block
// 10.0.0.0/8 + 64·i (so up to 64 pods per node and 262,144 nodes).
func podAddr(i, j int) netip.Addr {
	n := uint32(0x0a000000) + uint32(i)<<6 + uint32(j)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// NodeBlock is the /26 IPAM block of node i.
func NodeBlock(i int) netip.Prefix { return netip.PrefixFrom(podAddr(i, 0), 26) }

// Node is node i's Node resource with BGP address addr.
func (c Cluster) Node(i int, addr netip.Addr) *v3.Node {
	return &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: NodeName(i), Labels: map[string]string{"kubernetes.io/hostname": NodeName(i)}},
		Spec:       v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: netip.PrefixFrom(addr, 8).String()}}}
}

// namespaceOf is the namespace of pod j of node i.
func (c Cluster) namespaceOf(i, j int) string {
	return NamespaceName((i*c.PodsPerNode + j) % c.Namespaces)
}

// Endpoint is the WorkloadEndpoint of pod j on node i; gen changes its
// labels (a pod's churn).
func (c Cluster) Endpoint(i, j, gen int) *v3.WorkloadEndpoint {
	ns := c.namespaceOf(i, j)
	seq := i*c.PodsPerNode + j
	pod := fmt.Sprintf("pod-%d-%d", i, j)
	return &v3.WorkloadEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: NodeName(i) + "-k8s-" + pod + "-eth0", Namespace: ns, Labels: map[string]string{
			"app":                         fmt.Sprintf("app-%d", (seq+gen)%appValues),
			"role":                        fmt.Sprintf("role-%d", (seq/appValues+gen)%roleValues),
			"projectcalico.org/namespace": ns,
			"pod-template-hash":           fmt.Sprintf("h%d", seq%97),
		}},
		Spec: v3.WorkloadEndpointSpec{Orchestrator: "k8s", Node: NodeName(i), Pod: pod, Endpoint: "eth0",
			ContainerID: fmt.Sprintf("%064x", seq), InterfaceName: fmt.Sprintf("cali%011x", seq),
			IPNetworks: []string{netip.PrefixFrom(podAddr(i, j), 32).String()}, Profiles: []string{"kns." + ns}}}
}

// Profile is namespace i's kns. profile, as kube-controllers writes it.
func (c Cluster) Profile(i int) *v3.Profile {
	ns := NamespaceName(i)
	return &v3.Profile{TypeMeta: v3.TypeMeta{Kind: v3.KindProfile, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: "kns." + ns},
		Spec: v3.ProfileSpec{LabelsToApply: map[string]string{"pcns.projectcalico.org/name": ns},
			Ingress: []v3.Rule{{Action: v3.Allow}}, Egress: []v3.Rule{{Action: v3.Allow}}}}
}

// Policy is NetworkPolicy k (of c.Policies), in namespace k mod
// Namespaces; rev changes its rule (a policy edit).
func (c Cluster) Policy(k, rev int) *v3.NetworkPolicy {
	ns := NamespaceName(k % c.Namespaces)
	local := k / c.Namespaces
	order := float64(100 + local)
	return &v3.NetworkPolicy{TypeMeta: v3.TypeMeta{Kind: v3.KindNetworkPolicy, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("knp.default.pol-%d", local), Namespace: ns},
		Spec: v3.NetworkPolicySpec{Tier: "default", Order: &order,
			Selector: fmt.Sprintf("app == 'app-%d'", local%appValues),
			Types:    []v3.PolicyType{v3.PolicyTypeIngress},
			Ingress: []v3.Rule{{Action: v3.Allow, Protocol: protoTCP(),
				Source:      v3.EntityRule{Selector: fmt.Sprintf("role == 'role-%d'", (local+rev)%roleValues)},
				Destination: v3.EntityRule{Ports: portOf(8000 + rev%1000)}}}}}
}

func protoTCP() *numorstring.Protocol {
	p := numorstring.ProtocolFromString("TCP")
	return &p
}

func portOf(p int) []numorstring.Port { return []numorstring.Port{numorstring.SinglePort(uint16(p))} }
