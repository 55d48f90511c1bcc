package bgp_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/node/bgp"
)

// TestIgnoredInterfaces: routes whose next hop is reached through an
// interface BGPConfiguration ignoredInterfaces names are not installed
// (as BIRD, which then cannot resolve the next hop); naming another
// interface brings them back.
func TestIgnoredInterfaces(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	conf := &v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}}
	f.apply(conf)
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	blk2 := f.block("n2")
	f.start("n1")
	f.start("n2")
	f.waitRoute(f.ns["n1"], blk2, "198.18.0.2")
	conf.Spec.IgnoredInterfaces = []string{"eth*"}
	f.apply(conf)
	f.waitRoute(f.ns["n1"], blk2, "")
	conf.Spec.IgnoredInterfaces = []string{"ens*"}
	f.apply(conf)
	f.waitRoute(f.ns["n1"], blk2, "198.18.0.2")
}

// TestBindModeNodeIP: with bindMode NodeIP the node's GoBGP listens on its
// node address only, not on every address (here also 198.18.0.101), and
// the mesh still comes up.
func TestBindModeNodeIP(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	f.node("n1", "198.18.0.1/24", nil)
	f.lab.Run("ip", "-n", f.ns["n1"], "addr", "add", "198.18.0.101/24", "dev", "eth0")
	f.node("n2", "198.18.0.2/24", nil)
	blk2 := f.block("n2")
	f.start("n1")
	f.start("n2")
	listeners := func() string {
		return f.lab.Run("ip", "netns", "exec", f.ns["n1"], "ss", "-Hltn", "sport = :179")
	}
	eventually(t, 20*time.Second, "n1 listens on every address", func() (bool, string) {
		out := listeners()
		return strings.Contains(out, "0.0.0.0:179") || strings.Contains(out, "*:179"), out
	})
	mode := v3.BindModeNodeIP
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{BindMode: &mode}})
	eventually(t, 20*time.Second, "n1 listens on 198.18.0.1 only", func() (bool, string) {
		out := listeners()
		return strings.Contains(out, "198.18.0.1:179") && !strings.Contains(out, "0.0.0.0:179") && !strings.Contains(out, "*:179") &&
			!strings.Contains(out, "[::]:179"), out
	})
	f.waitRoute(f.ns["n1"], blk2, "198.18.0.2")
}

// TestIgnoredConfig: every BGPConfiguration field that is set but not
// acted on is named; Calico's defaults and the fields acted on say
// nothing.
func TestIgnoredConfig(t *testing.T) {
	disabled := "Disabled"
	got := strings.Join(bgp.IgnoredConfig(v3.BGPConfigurationSpec{
		LogSeverityScreen: "Debug", ProgramClusterRoutes: &disabled,
	}), "\n")
	for _, field := range []string{"spec.logSeverityScreen Debug", "spec.programClusterRoutes Disabled"} {
		if !strings.Contains(got, field) {
			t.Errorf("IgnoredConfig does not name %s:\n%s", field, got)
		}
	}
	enabled, on, mode := "Enabled", true, v3.BindModeNodeIP
	if notes := bgp.IgnoredConfig(v3.BGPConfigurationSpec{
		LogSeverityScreen: "Info", ProgramClusterRoutes: &enabled, NodeToNodeMeshEnabled: &on, BindMode: &mode,
		IgnoredInterfaces: []string{"eth1"}, ListenPort: 1790,
		LocalWorkloadPeeringIPV4: "169.254.0.179", LocalWorkloadPeeringIPV6: "fe80::179",
	}); len(notes) > 0 {
		t.Errorf("a configuration with only fields acted on: %v", notes)
	}
}

func TestIgnoredNodeConfig(t *testing.T) {
	mode := v3.BindModeNodeIP
	got := bgp.IgnoredNodeConfig(v3.BGPConfigurationSpec{ListenPort: 1790, BindMode: &mode})
	if len(got) != 1 || !strings.HasPrefix(got[0], "spec.bindMode is not acted on in a node's BGPConfiguration") {
		t.Errorf("IgnoredNodeConfig = %q, want bindMode named alone", got)
	}
	if got := bgp.IgnoredNodeConfig(v3.BGPConfigurationSpec{ListenPort: 1790}); len(got) != 0 {
		t.Errorf("listenPort alone: %q", got)
	}
}

// TestRouteProtocol: a node configured with another route protocol
// number marks its kernel routes with it, not the default.
func TestRouteProtocol(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	blk1, blk2 := f.block("n1"), f.block("n2")
	f.start("n1")
	f.start("n2", "-proto", "222")
	eventually(t, 30*time.Second, "n2 routes n1's block with protocol 222", func() (bool, string) {
		out := f.lab.Run("ip", "-n", f.ns["n2"], "route", "show", "proto", "222")
		return strings.Contains(out, blk1.String()+" via 198.18.0.1") && strings.Contains(out, "blackhole "+blk2.String()), out
	})
	if out := f.ours(f.ns["n2"]); strings.TrimSpace(out) != "" {
		t.Errorf("n2 has routes of the default protocol %s:\n%s", proto, out)
	}
}

// TestSessionDownReason: a session BIRD refuses (it expects another AS,
// and closes the connection during the OPEN exchange) says why in the
// peer table (what calicoctl node status prints), and once it has been
// down a while the node logs that at warning level.
func TestSessionDownReason(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "tor"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 65001}})
	f.startBird("tor", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol bgp n1 { local 198.18.0.250 as 65001; neighbor 198.18.0.1 as 65000; connect delay time 1; error wait time 1, 2;
  ipv4 { import all; export all; }; }
`)
	f.node("n1", "198.18.0.1/24", nil)
	sock := filepath.Join(t.TempDir(), "peers.sock")
	began := time.Now()
	f.start("n1", "-peers", sock)
	defer func() { t.Logf("took %s", time.Since(began)) }()
	eventually(t, 40*time.Second, "the session says it failed during OPEN", func() (bool, string) {
		ps, err := peerTable(sock)
		if err != nil {
			return false, err.Error()
		}
		return len(ps) == 1 && ps[0].State != "Established" && strings.HasPrefix(ps[0].Reason, "Went down in Open"), fmt.Sprintf("%+v", ps)
	})
	t.Logf("reason shown after %s", time.Since(began))
	eventually(t, 30*time.Second, "a warning that the session stays down", func() (bool, string) {
		l := f.log("n1")
		return strings.Contains(l, "level=warning") && strings.Contains(l, `msg="BGP session is still down"`) && strings.Contains(l, "peer=198.18.0.250"), l
	})
}
