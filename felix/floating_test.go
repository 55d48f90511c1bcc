package felix

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// floatingFelixConfig is the FelixConfiguration of the floating IP test,
// with floatingIPs as given, on the cluster's dataplane.
func (c *cluster) floatingFelixConfig(floating string) string {
	return fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  iptablesBackend: NFT
  ipv6Support: true
  bpfEnabled: %t
  floatingIPs: %s
  iptablesRefreshInterval: 1s
  routeRefreshInterval: 2s
`, c.bpf, floating)
}

// waitWarning waits for felix to log a warning containing msg.
func (c *cluster) waitWarning(hook *logtest.Hook, msg string) {
	c.t.Helper()
	c.waitFor("the warning "+strconv.Quote(msg), func() bool {
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && strings.Contains(e.Message, msg) {
				return true
			}
		}
		return false
	})
}

// TestFloatingIPs: a WorkloadEndpoint's ipNATs, with floatingIPs
// Enabled, make the pod reachable at its floating addresses (IPv4 and
// IPv6) from a client in another namespace, from the host, and from the
// pod itself: the pod sees the client's own address, and the replies
// come back from the floating address (a connected UDP socket takes
// datagrams from the address it sent to only). With floatingIPs Disabled
// (the default, with a warning), or once the ipNATs are gone, nothing
// answers at the floating addresses. On both dataplanes: the eBPF one
// translates in its programs, where the clients' packets enter (the
// host's own in nat OUTPUT, as iptables).
func TestFloatingIPs(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) { floatingIPs(t, dp) })
	}
}

func floatingIPs(t *testing.T, dp string) {
	hook := logtest.NewGlobal()
	defer logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	c := newClusterIPv6(t, dp, true)
	c.apply(c.floatingFelixConfig("Disabled"))
	_, ext6 := c.addIPv6()
	web := c.addDualPod("ns-a", "web", "10.65.0.20", "fd65::20", nil, "sa-x")
	other := c.addDualPod("ns-a", "other", "10.65.0.21", "fd65::21", nil, "sa-x")
	fip4, fip6 := netip.MustParseAddr("10.65.200.9"), netip.MustParseAddr("fd65::f:9")

	w := *web.wep
	w.ResourceVersion = ""
	w.Spec.IPNATs = []v3.IPNAT{{InternalIP: web.ip.String(), ExternalIP: fip4.String()}, {InternalIP: web.ip6.String(), ExternalIP: fip6.String()}}
	if _, err := c.store.Apply(c.ctx, &w); err != nil {
		t.Fatal(err)
	}

	type client struct {
		name      string
		run       *nsexec.Runner
		src, src6 netip.Addr // the source the pod must see
	}
	clients := []client{
		{"ext", c.extRun, extAddr, ext6},
		{"other pod", other.run, other.ip, other.ip6},
		// The pod itself: DNAT'd back to itself and SNAT'd to its
		// floating address, so the reply comes back through the host.
		{"the pod itself", web.run, fip4, fip6},
	}
	// reach probes fip from cl once: TCP and UDP, whether both got an
	// answer and whether the pod saw the right source.
	reach := func(cl client, fip netip.Addr) (bool, string) {
		want := cl.src
		if fip.Is6() {
			want = cl.src6
		}
		tcp, errT := nstest.TCP(cl.run, fip, 8080)
		udp, errU := nstest.UDP(cl.run, fip, 8080)
		if errT != nil || errU != nil {
			return false, fmt.Sprintf("tcp: %v, udp: %v", errT, errU)
		}
		for _, seen := range []string{tcp, udp} {
			if host, _, _ := net.SplitHostPort(seen); host != want.String() {
				return true, fmt.Sprintf("the pod saw source %s, want %s", host, want)
			}
		}
		return true, ""
	}
	expect := func(what string, reachable bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var bad []string
			for _, cl := range clients {
				for _, fip := range []netip.Addr{fip4, fip6} {
					ok, note := reach(cl, fip)
					switch {
					case ok != reachable:
						bad = append(bad, fmt.Sprintf("%s → %s: reachable %t, want %t (%s)", cl.name, fip, ok, reachable, note))
					case ok && note != "":
						bad = append(bad, fmt.Sprintf("%s → %s: %s", cl.name, fip, note))
					}
				}
			}
			if len(bad) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s:\n  %s", what, strings.Join(bad, "\n  "))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The pod's own addresses answer throughout (the probes can work).
	for _, cl := range clients[:2] {
		for _, dst := range []netip.Addr{web.ip, web.ip6} {
			c.waitFor(fmt.Sprintf("%s reaching the pod at %s", cl.name, dst), func() bool {
				_, err := nstest.TCP(cl.run, dst, 8080)
				return err == nil
			})
		}
	}

	c.waitWarning(hook, "not programmed: FelixConfiguration floatingIPs is Disabled")
	expect("floatingIPs Disabled", false)

	c.apply(c.floatingFelixConfig("Enabled"))
	expect("floatingIPs Enabled", true)
	// Other protocols: ICMP echo (IPv4; on eBPF translated by
	// cali-fip-dnat in netfilter, after the programs).
	for _, cl := range clients[:2] {
		c.waitFor(cl.name+" pinging "+fip4.String(), func() bool { return nstest.ICMP(cl.run, fip4, 8, 0) == nil })
	}
	if c.bpf {
		// The programs translated the clients' packets before
		// netfilter saw them: the host's conntrack knows the flows to
		// the pod's own address, none to the floating one (but the
		// host's own, which nat OUTPUT translates).
		ct := c.node.MustRun(t, "cat", "/proc/net/nf_conntrack")
		for _, line := range strings.Split(ct, "\n") {
			if strings.Contains(line, " icmp ") {
				continue // ICMP is netfilter's to translate
			}
			for _, cl := range clients {
				if strings.Contains(line, "src="+cl.src.String()+" dst="+fip4.String()+" ") {
					t.Errorf("netfilter translated %s's flow to the floating IP (the programs did not): %s", cl.name, line)
				}
			}
		}
		if !strings.Contains(ct, "src="+extAddr.String()+" dst="+web.ip.String()+" ") {
			t.Errorf("no conntrack entry of ext's flow to the pod's own address:\n%s", ct)
		}
	}
	// The host itself reaches the pod through the nat OUTPUT hook (it
	// sees the node's address on eth-ext or the pool route's source).
	c.waitFor("the host reaching the floating addresses", func() bool {
		_, e4 := nstest.TCP(c.nodeRun, fip4, 8080)
		_, e6 := nstest.TCP(c.nodeRun, fip6, 8080)
		return e4 == nil && e6 == nil
	})

	// The ipNATs go: nothing answers at the floating addresses.
	w2 := *web.wep
	w2.ResourceVersion = ""
	if _, err := c.store.Apply(c.ctx, &w2); err != nil {
		t.Fatal(err)
	}
	expect("ipNATs removed", false)

	// Back, then floatingIPs Disabled again.
	if _, err := c.store.Apply(c.ctx, &w); err != nil {
		t.Fatal(err)
	}
	expect("ipNATs back", true)
	c.apply(c.floatingFelixConfig("Disabled"))
	expect("floatingIPs Disabled again", false)
}

// addIPv6 gives the cluster an IPv6 pool (fd65::/64) and the node and
// the external namespace IPv6 addresses on their link, the external one
// routing the pool through the node; it returns the two addresses.
func (c *cluster) addIPv6() (node6, ext6 netip.Addr) {
	c.t.Helper()
	c.apply(`apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-v6}
spec: {cidr: "fd65::/64"}
`)
	node6, ext6 = netip.MustParseAddr("fd00:18::1"), netip.MustParseAddr("fd00:18::2")
	c.node.MustRun(c.t, "ip", "-6", "addr", "add", node6.String()+"/64", "dev", "eth-ext", "nodad")
	c.ext.MustRun(c.t, "ip", "-6", "addr", "add", ext6.String()+"/64", "dev", "eth0", "nodad")
	c.ext.MustRun(c.t, "ip", "-6", "route", "add", "fd65::/64", "via", node6.String())
	return node6, ext6
}
