package felix

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// sinkPort is where the anti-spoofing test's receivers listen (UDP).
const sinkPort = 7777

// spoofFelixConfig is the FelixConfiguration of the anti-spoofing test:
// workload traffic to the host is accepted, so that the host is a target
// a forged packet could reach.
const spoofFelixConfig = `apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  iptablesBackend: NFT
  ipv6Support: true
  defaultEndpointToHostAction: Accept
  iptablesRefreshInterval: 1s
  routeRefreshInterval: 2s
`

// spoofTarget is a namespace with a sink and its address per family.
type spoofTarget struct {
	name        string
	sink        *nstest.Sink
	addr, addr6 netip.Addr
}

// TestAntiSpoofing: a pod forging another pod's source address reaches
// nobody (the pod it targets, another node-local pod in another
// namespace, the pod whose address it forges, the host), IPv4 and IPv6,
// while its own address gets through; allowSpoofedSourcePrefixes let a
// pod send from them only with workloadSourceSpoofing: Any.
func TestAntiSpoofing(t *testing.T) {
	hook := logtest.NewGlobal()
	defer logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	c := newClusterIPv6(t, "NFT", true)
	c.apply(spoofFelixConfig + `---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-v6}
spec: {cidr: "fd65::/64"}
`)
	node6 := netip.MustParseAddr("fd00:18::1")
	c.node.MustRun(t, "ip", "-6", "addr", "add", node6.String()+"/64", "dev", "eth-ext", "nodad")
	attacker := c.addDualPod("ns-a", "attacker", "10.65.0.10", "fd65::10", nil, "sa-x")
	victim := c.addDualPod("ns-a", "victim", "10.65.0.11", "fd65::11", nil, "sa-x")
	target := c.addDualPod("ns-a", "target", "10.65.0.12", "fd65::12", nil, "sa-x")
	bystander := c.addDualPod("ns-b", "bystander", "10.65.0.13", "fd65::13", nil, "sa-y")

	var targets []*spoofTarget
	for _, tg := range []struct {
		name        string
		p           *pod
		addr, addr6 netip.Addr
	}{
		{"victim", victim, victim.ip, victim.ip6},
		{"target", target, target.ip, target.ip6},
		{"bystander", bystander, bystander.ip, bystander.ip6},
		{"host", nil, nodeAddr, node6},
	} {
		run := c.nodeRun
		if tg.p != nil {
			run = tg.p.run
		}
		sink, err := nstest.Listen(run, sinkPort)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sink.Close)
		targets = append(targets, &spoofTarget{name: tg.name, sink: sink, addr: tg.addr, addr6: tg.addr6})
	}
	seq := 0
	token := func() string { seq++; return fmt.Sprintf("%s-%d", t.Name(), seq) }
	dst := func(tg *spoofTarget, v6 bool) netip.Addr {
		if v6 {
			return tg.addr6
		}
		return tg.addr
	}
	own := func(v6 bool) netip.Addr {
		if v6 {
			return attacker.ip6
		}
		return attacker.ip
	}
	// arrives waits for a datagram sent from src to reach tg.
	arrives := func(tg *spoofTarget, src netip.Addr) bool {
		deadline := time.Now().Add(3 * time.Second)
		for {
			tok := token()
			if err := nstest.SendUDPFrom(attacker.run, src, dst(tg, src.Is6()), sinkPort, tok); err != nil {
				t.Fatal(err)
			}
			for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
				if from, ok := tg.sink.From(tok); ok {
					return from == src
				}
			}
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	// blocked sends a datagram from the forged src, then one from the
	// attacker's own address on the same path: once that one is in, the
	// forged one would have been too.
	blocked := func(tg *spoofTarget, src netip.Addr) bool {
		forged, genuine := token(), token()
		v6 := src.Is6()
		if err := nstest.SendUDPFrom(attacker.run, src, dst(tg, v6), sinkPort, forged); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			if err := nstest.SendUDPFrom(attacker.run, own(v6), dst(tg, v6), sinkPort, genuine); err != nil {
				t.Fatal(err)
			}
			for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
				if _, ok := tg.sink.From(genuine); ok {
					_, leaked := tg.sink.From(forged)
					return !leaked
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the attacker's own datagram to %s (%s) never arrived: the test cannot tell", tg.name, dst(tg, v6))
			}
		}
	}
	expectBlocked := func(what string, srcs ...netip.Addr) {
		t.Helper()
		for _, src := range srcs {
			for _, tg := range targets {
				if dst(tg, src.Is6()) == src {
					continue // a datagram to its own source never leaves the socket
				}
				if !blocked(tg, src) {
					t.Errorf("%s: a datagram from %s forged by the attacker reached %s", what, src, tg.name)
				}
			}
		}
	}
	rpFilter := func(p *pod) string {
		var b []byte
		if err := c.nodeRun.Do(func() (err error) {
			b, err = os.ReadFile("/proc/sys/net/ipv4/conf/" + p.iface + "/rp_filter")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	// The attacker's own addresses get through (the probes can fail).
	for _, tg := range targets {
		for _, src := range []netip.Addr{attacker.ip, attacker.ip6} {
			if !arrives(tg, src) {
				t.Fatalf("the attacker's own %s does not reach %s", src, tg.name)
			}
		}
	}
	expectBlocked("another pod's address", victim.ip, victim.ip6)
	expectBlocked("the host's address", nodeAddr, node6)
	expectBlocked("an outside address", extAddr, netip.MustParseAddr("fd00:99::5"))
	for _, p := range []*pod{attacker, victim, target, bystander} {
		if v := rpFilter(p); v != "1" {
			t.Errorf("rp_filter of %s is %s, want 1 (strict)", p.iface, v)
		}
	}

	// allowSpoofedSourcePrefixes without workloadSourceSpoofing: Any are
	// ignored, with a warning.
	spoofed4, spoofed6 := netip.MustParseAddr("10.99.0.5"), netip.MustParseAddr("fd00:99::5")
	w := *attacker.wep
	w.ResourceVersion = ""
	w.Spec.AllowSpoofedSourcePrefixes = []string{"10.99.0.0/24", "fd00:99::/64"}
	if _, err := c.store.Apply(c.ctx, &w); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the warning that allowSpoofedSourcePrefixes are ignored", func() bool {
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "allowSpoofedSourcePrefixes ignored") {
				return true
			}
		}
		return false
	})
	expectBlocked("allowed prefixes, workloadSourceSpoofing unset", spoofed4, spoofed6)

	// With Any, the pod may send from them, and still from nothing else.
	c.apply(spoofFelixConfig + "  workloadSourceSpoofing: Any\n")
	c.waitFor("the allowed prefixes in cali-rpf-skip and rp_filter 0 on the attacker", func() bool {
		raw4 := c.node.MustRun(t, "iptables-nft-save", "-t", "raw")
		raw6 := c.node.MustRun(t, "ip6tables-nft-save", "-t", "raw")
		return strings.Contains(raw4, "-s 10.99.0.0/24") && strings.Contains(raw6, "-s fd00:99::/64") && rpFilter(attacker) == "0"
	})
	for _, tg := range targets[1:] {
		for _, src := range []netip.Addr{spoofed4, spoofed6} {
			if !arrives(tg, src) {
				t.Errorf("workloadSourceSpoofing Any: a datagram from the allowed %s does not reach %s", src, tg.name)
			}
		}
	}
	expectBlocked("another pod's address, workloadSourceSpoofing Any", victim.ip, victim.ip6)
	expectBlocked("outside the allowed prefixes", netip.MustParseAddr("10.99.1.5"), netip.MustParseAddr("fd00:98::5"))
	if v := rpFilter(victim); v != "1" {
		t.Errorf("rp_filter of the victim is %s, want 1", v)
	}

	// Disabled again: the prefixes are gone.
	c.apply(spoofFelixConfig + "  workloadSourceSpoofing: Disabled\n")
	c.waitFor("cali-rpf-skip without the prefixes", func() bool {
		return !strings.Contains(c.node.MustRun(t, "iptables-nft-save", "-t", "raw"), "-s 10.99.0.0/24") && rpFilter(attacker) == "1"
	})
	expectBlocked("allowed prefixes, workloadSourceSpoofing Disabled", spoofed4, spoofed6)
}
