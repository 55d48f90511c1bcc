package cniplugin

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestPoolNamespaceSelector: a pool's namespaceSelector limits it to
// pods of the namespaces whose labels it matches, as in Calico's IPAM. A
// pod of a blue namespace gets its address from the blue pool, a pod of
// a red one from the red pool, and a pod of a namespace neither selects
// gets no address at all; a pod naming a pool (ipv4pools) gets it
// whatever its namespace.
func TestPoolNamespaceSelector(t *testing.T) {
	c := newCluster(t)
	for _, p := range []struct{ name, cidr, sel string }{
		{"blue-pool", "10.86.0.0/16", "team == 'blue'"},
		{"red-pool", "10.87.0.0/16", "team == 'red'"},
	} {
		c.addPoolSpec(p.name, v3.IPPoolSpec{CIDR: p.cidr, BlockSize: 26, NamespaceSelector: p.sel})
	}
	n := c.newKubeNode(t, "node1")
	suffix := fmt.Sprint(time.Now().UnixNano() % 100000)
	blue, red, plain := "blue-"+suffix, "red-"+suffix, "plain-"+suffix
	kubeNamespace(t, n.kc, blue, map[string]string{"team": "blue"}, nil)
	kubeNamespace(t, n.kc, red, map[string]string{"team": "red"}, nil)
	kubeNamespace(t, n.kc, plain, nil, nil)
	list := n.kubeConf(t, nil, nil)

	for _, tc := range []struct {
		ns   string
		want netip.Prefix
	}{
		{blue, netip.MustParsePrefix("10.86.0.0/16")},
		{red, netip.MustParsePrefix("10.87.0.0/16")},
	} {
		p := n.newPod(tc.ns, "web")
		kubePod(t, n.kc, p, "node1", "", nil, nil)
		r, err := n.add(list, p.runtimeConf(true))
		if err != nil {
			t.Fatalf("ADD in %s: %v", tc.ns, err)
		}
		if _, addrs := resultAddrs(t, r); len(addrs) != 1 || !tc.want.Contains(addrs[0].Addr()) {
			t.Errorf("pod in %s got %v, want an address of %s", tc.ns, addrs, tc.want)
		}
		if err := n.del(list, p.runtimeConf(true)); err != nil {
			t.Fatal(err)
		}
	}

	p := n.newPod(plain, "web")
	kubePod(t, n.kc, p, "node1", "", nil, nil)
	if _, err := n.add(list, p.runtimeConf(true)); err == nil || !strings.Contains(err.Error(), "no enabled IPv4 pool selects this node and namespace") {
		t.Errorf("ADD in a namespace no pool selects: %v", err)
	}
	n.nothingLeft(t, p)

	q := n.newPod(plain, "named")
	kubePod(t, n.kc, q, "node1", "", nil, map[string]string{"cni.projectcalico.org/ipv4pools": `["red-pool"]`})
	r, err := n.add(list, q.runtimeConf(true))
	if err != nil {
		t.Fatalf("ADD naming red-pool: %v", err)
	}
	if _, addrs := resultAddrs(t, r); len(addrs) != 1 || !netip.MustParsePrefix("10.87.0.0/16").Contains(addrs[0].Addr()) {
		t.Errorf("pod naming red-pool got %v", addrs)
	}
	if err := n.del(list, q.runtimeConf(true)); err != nil {
		t.Fatal(err)
	}
}
