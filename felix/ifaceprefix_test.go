package felix

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/names"
)

// plainPod plumbs a pod on a host interface of any name, without an
// endpoint (the caller writes one, or not).
func (c *cluster) plainPod(name, iface, ip string) *pod {
	c.t.Helper()
	p := &pod{ns: "ns-a", name: name, ip: netip.MustParseAddr(ip), iface: iface}
	p.netns = nstest.New(c.t, c.prefix, "pod-"+name)
	p.run = nstest.Runner(c.t, p.netns)
	podH, podNS := nstest.Handle(c.t, p.netns)
	if err := nstest.Workload(c.nodeH, podH, podNS, iface, p.ip); err != nil {
		c.t.Fatalf("pod %s: %v", name, err)
	}
	var err error
	if p.srv, err = nstest.Serve(p.run, 8080, 8081); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(p.srv.Close)
	c.pods[name] = p
	return p
}

// TestInterfacePrefix: with interfacePrefix "cali,tap", workloads on tap
// interfaces get policy like cali ones, and an unknown tap interface is
// cut off (its traffic dropped by the dispatch, and its hand-made route
// swept by the route refresh) where before felix left it alone.
func TestInterfacePrefix(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) { testInterfacePrefix(t, dp) })
	}
}

func testInterfacePrefix(t *testing.T, dp string) {
	c := newCluster(t, dp)
	setupPods(c)

	// A pod on a tap interface felix knows nothing of, with a route to it
	// by hand: before tap is a workload prefix, its traffic is not felix's.
	rogue := c.plainPod("rogue", "tapunknown01", "10.65.0.9")
	c.node.MustRun(t, "ip", "route", "add", "10.65.0.9/32", "dev", rogue.iface, "scope", "link")
	c.expect(allow("rogue", "web", "tcp", 8080))

	c.apply(c.felixConfig() + "  interfacePrefix: cali,tap\n")
	if c.bpf {
		c.waitIface(rogue.iface, "blocked")
	} else {
		c.waitFor("tap+ dispatched by felix", func() bool { return strings.Contains(c.filter(), "-i tap+ ") })
	}
	c.expect(deny("rogue", "web", "tcp", 8080), deny("web", "rogue", "tcp", 8080))

	// A workload on a tap interface: policy applies to it as to cali ones.
	tp := c.plainPod("tapclient", "tap0123456789", "10.65.0.10")
	wep := &v3.WorkloadEndpoint{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: names.WorkloadEndpointName(nodeName, "k8s", "tapclient", "eth0"), Namespace: "ns-a", Labels: map[string]string{"app": "client"}},
		Spec: v3.WorkloadEndpointSpec{Orchestrator: "k8s", Node: nodeName, Pod: "tapclient", Endpoint: "eth0", InterfaceName: tp.iface,
			IPNetworks: []string{"10.65.0.10/32"}, Profiles: []string{"kns.ns-a"},
			Ports: []v3.WorkloadEndpointPort{{Name: "http", Protocol: numorstring.ProtocolFromString("TCP"), Port: 8080}}},
	}
	if _, err := c.store.Apply(c.ctx, wep); err != nil {
		t.Fatal(err)
	}
	c.waitProgrammed("ns-a", wep.Name)
	if c.bpf {
		c.waitIface(tp.iface, "workload")
	} else if !strings.Contains(c.filter(), ":cali-fw-"+tp.iface+" ") {
		t.Fatalf("no endpoint chain for %s", tp.iface)
	}
	rs := c.apply(core[1].yaml) // web: TCP 8080 from app == 'client' of ns-a
	c.waitPolicies(rs, true)
	c.expect(allow("tapclient", "web", "tcp", 8080), deny("tapclient", "web", "tcp", 8081),
		allow("web", "tapclient", "tcp", 8080), deny("rogue", "web", "tcp", 8080))
}
