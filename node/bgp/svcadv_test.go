package bgp_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
	"github.com/palisade-net/palisade/node/bgp/internal/nstest"
)

const kubeAddr = "198.18.0.254:6443"

// kube runs a real kube-apiserver, reachable in the fabric at kubeAddr
// (proxied to loopback), and returns the cluster and the path of a
// kubeconfig for the nodes. The server's certificate names 127.0.0.1, so
// the kubeconfig asks for that name.
func (f *fabric) kube() (*kubetest.Cluster, string) {
	f.t.Helper()
	c := kubetest.Start(f.t)
	u, err := url.Parse(c.URL)
	if err != nil {
		f.t.Fatal(err)
	}
	var ln net.Listener
	if err := nstest.Do(f.br, func() (err error) { ln, err = net.Listen("tcp", kubeAddr); return err }); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { ln.Close() })
	go proxy(ln, u.Host, new(atomic.Int64))
	kc := strings.Replace(string(c.Files.Kubeconfig("https://"+kubeAddr)), "    server: https://"+kubeAddr+"\n",
		"    server: https://"+kubeAddr+"\n    tls-server-name: 127.0.0.1\n", 1)
	path := filepath.Join(f.t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return c, path
}

// routeTable reads BIRD's routes with a next hop (learned ones, not its
// own connected ones) as prefix → sorted next hops.
func (b *birdPeer) routeTable() (map[string][]string, string) {
	out := b.show("show", "route", "table", "all")
	table := map[string][]string{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' && strings.Contains(fs[0], "/") {
			cur = fs[0]
		}
		if fs[0] == "via" && len(fs) > 1 && cur != "" {
			table[cur] = append(table[cur], fs[1])
		}
	}
	for k := range table {
		sort.Strings(table[k])
	}
	return table, out
}

// waitTable waits until BIRD's routes are exactly want.
func (b *birdPeer) waitTable(what string, want map[string][]string) {
	b.f.t.Helper()
	for k := range want {
		sort.Strings(want[k])
	}
	eventually(b.f.t, 30*time.Second, what, func() (bool, string) {
		got, out := b.routeTable()
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("want %v\n got %v\n%s", want, got, out)
	})
}

func readyEP(node, addr string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
}

// TestServiceAdvertisement: two dual-stack nodes with Service
// advertisement configured (cluster, external and LoadBalancer ranges,
// IPv4 and IPv6) peer with an external BIRD, against a real
// kube-apiserver. BIRD has the ranges from both nodes (ECMP); a Service
// with externalTrafficPolicy Local as /32 and /128 only from the node with
// a ready endpoint, following the endpoint as it moves, goes not-ready
// and its slice is deleted; an external IP outside the ranges never; the
// /32s carry the ranges' communities; a BGPFilter export rule holds one
// back; a deleted Service is withdrawn.
func TestServiceAdvertisement(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	kc, kubeconfig := f.kube()
	ctx := context.Background()
	conf := &v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{
		ServiceClusterIPs:      []v3.ServiceClusterIPBlock{{CIDR: "10.96.0.0/16"}},
		ServiceExternalIPs:     []v3.ServiceExternalIPBlock{{CIDR: "198.19.200.0/24"}, {CIDR: "fd00:200::/112"}},
		ServiceLoadBalancerIPs: []v3.ServiceLoadBalancerIPBlock{{CIDR: "198.19.201.0/24"}, {CIDR: "fd00:201::/112"}},
		PrefixAdvertisements:   []v3.PrefixAdvertisement{{CIDR: "198.19.201.0/24", Communities: []string{"65000:201"}}},
	}}
	f.apply(conf)
	nodes := map[string][2]string{"n1": {"198.18.0.1", "fd00:198::1"}, "n2": {"198.18.0.2", "fd00:198::2"}}
	for n, a := range nodes {
		f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "tor-" + n}, Spec: v3.BGPPeerSpec{Node: n, PeerIP: "198.18.0.250", ASNumber: 65001}})
		f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "tor6-" + n}, Spec: v3.BGPPeerSpec{Node: n, PeerIP: "fd00:198::250", ASNumber: 65001}})
		_ = a
	}
	var sb strings.Builder
	sb.WriteString("router id 198.18.0.250;\nprotocol device { }\nprotocol direct { ipv4; ipv6; interface \"eth0\"; }\n")
	for n, a := range nodes {
		fmt.Fprintf(&sb, "protocol bgp %s { local 198.18.0.250 as 65001; neighbor %s as 64512; ipv4 { import all; export none; }; }\n", n, a[0])
		fmt.Fprintf(&sb, "protocol bgp %s6 { local fd00:198::250 as 65001; neighbor %s as 64512; ipv6 { import all; export none; }; }\n", n, a[1])
	}
	b := f.startBird("tor", "198.18.0.250/24", bird2Bin, bird2Ctl, sb.String())
	f.lab.Run("ip", "-n", b.ns, "addr", "add", "fd00:198::250/64", "dev", "eth0", "nodad")

	// The Service exists before the nodes start: it is in their first
	// list.
	svc, err := kc.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			ExternalIPs: []string{"198.19.200.10", "fd00:200::10", "203.0.113.10"},
			Ports:       []corev1.ServicePort{{Port: 80}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.19.201.10"}, {IP: "fd00:201::10"}}
	if svc, err = kc.Client.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterIP := svc.Spec.ClusterIP + "/32"
	for n, a := range nodes {
		f.addNS(n, a[0]+"/24", a[1]+"/64")
		f.apply(&v3.Node{ObjectMeta: v3.ObjectMeta{Name: n}, Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: a[0] + "/24", IPv6Address: a[1] + "/64"}}})
		f.startEnv(n, []string{"KUBECONFIG=" + kubeconfig})
	}
	both4 := []string{"198.18.0.1", "198.18.0.2"}
	both6 := []string{"fd00:198::1", "fd00:198::2"}
	ranges := func() map[string][]string {
		return map[string][]string{
			"10.96.0.0/16": both4, "198.19.200.0/24": both4, "198.19.201.0/24": both4,
			"fd00:200::/112": both6, "fd00:201::/112": both6,
		}
	}
	// on returns the ranges plus the Service's /32s and /128s from one
	// node.
	on := func(n string) map[string][]string {
		m := ranges()
		a := nodes[n]
		for _, p := range []string{clusterIP, "198.19.200.10/32", "198.19.201.10/32"} {
			m[p] = []string{a[0]}
		}
		for _, p := range []string{"fd00:200::10/128", "fd00:201::10/128"} {
			m[p] = []string{a[1]}
		}
		return m
	}
	b.waitTable("the service ranges from both nodes, no Service address", ranges())

	slices := kc.Client.DiscoveryV1().EndpointSlices("default")
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{readyEP("n1", "10.244.0.5", true)},
	}
	if es, err = slices.Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitTable("the Service's addresses from n1 only", on("n1"))
	if out := b.show("show", "route", "for", "198.19.201.10/32", "all"); !strings.Contains(out, "BGP.community: (65000,201)") {
		t.Errorf("the LoadBalancer /32 lacks its range's community:\n%s", out)
	}

	// The endpoint moves to n2.
	es.Endpoints = []discoveryv1.Endpoint{readyEP("n1", "10.244.0.5", false), readyEP("n2", "10.244.1.5", true)}
	if es, err = slices.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitTable("the Service's addresses from n2 only", on("n2"))

	// n2's goes not ready too: nobody advertises the Service.
	es.Endpoints = []discoveryv1.Endpoint{readyEP("n1", "10.244.0.5", false), readyEP("n2", "10.244.1.5", false)}
	if es, err = slices.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitTable("no Service address without a ready endpoint", ranges())

	// Ready on both: ECMP /32s; then the slice is deleted.
	es.Endpoints = []discoveryv1.Endpoint{readyEP("n1", "10.244.0.5", true), readyEP("n2", "10.244.1.5", true)}
	if es, err = slices.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	all := ranges()
	for _, p := range []string{clusterIP, "198.19.200.10/32", "198.19.201.10/32"} {
		all[p] = both4
	}
	for _, p := range []string{"fd00:200::10/128", "fd00:201::10/128"} {
		all[p] = both6
	}
	b.waitTable("the Service's addresses from both nodes", all)
	if err := slices.Delete(ctx, es.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitTable("no Service address once its slice is deleted", ranges())

	// A BGPFilter on n1's IPv4 session holds back the LoadBalancer /32.
	f.apply(&v3.BGPFilter{ObjectMeta: v3.ObjectMeta{Name: "no-lb"}, Spec: v3.BGPFilterSpec{ExportV4: []v3.BGPFilterRuleV4{
		{Action: v3.BGPFilterReject, MatchOperator: v3.MatchOperatorEqual, CIDR: "198.19.201.10/32"},
	}}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "tor-n1"}, Spec: v3.BGPPeerSpec{Node: "n1", PeerIP: "198.18.0.250", ASNumber: 65001, Filters: []string{"no-lb"}}})
	es = &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-2", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{readyEP("n1", "10.244.0.6", true)},
	}
	if _, err = slices.Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	filtered := on("n1")
	delete(filtered, "198.19.201.10/32")
	b.waitTable("n1's Service addresses but the filtered one", filtered)

	// The Service is deleted: its addresses go, the ranges stay.
	if err := kc.Client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitTable("no Service address once the Service is deleted", ranges())
}
