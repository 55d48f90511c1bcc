package bgp_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// writeSecret writes <dir>/<name>/<key> as a mounted Kubernetes secret
// would hold it.
func writeSecret(t *testing.T, dir, name, key, value string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name, key), []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestPassword: a BGPPeer to BIRD with password.secretKeyRef, BIRD
// configured with the password (TCP MD5). n1's secret file holds the
// right password (with the newline an editor leaves): its session comes
// up and BIRD learns its block. n2's holds a wrong one: its session stays
// down and BIRD learns nothing from it, until the file is corrected.
func TestPassword(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "rr"}, Spec: v3.BGPPeerSpec{
		PeerIP: "198.18.0.250", ASNumber: 64512,
		Password: &v3.BGPPassword{SecretKeyRef: &v3.SecretKeySelector{Name: "bgp-secrets", Key: "rr-password"}},
	}})
	b := f.startBird("rr", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
template bgp nodes { local 198.18.0.250 as 64512; rr client; password "Tr0ub4dor&3"; ipv4 { import all; export all; }; }
protocol bgp n1 from nodes { neighbor 198.18.0.1 as 64512; }
protocol bgp n2 from nodes { neighbor 198.18.0.2 as 64512; }
`)
	good, bad := t.TempDir(), t.TempDir()
	writeSecret(t, good, "bgp-secrets", "rr-password", "Tr0ub4dor&3\n")
	writeSecret(t, bad, "bgp-secrets", "rr-password", "correct horse")
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	b1, b2 := f.block("n1"), f.block("n2")
	f.start("n1", "-secrets", good)
	f.start("n2", "-secrets", bad)

	b.waitHas(b1, true)
	// n1 is up; n2 is not, and stays so.
	b.staysDown("n2", b2, "with a wrong password")
	f.waitRoute(f.ns["n2"], b1, "")

	// The corrected file is picked up without a restart.
	writeSecret(t, bad, "bgp-secrets", "rr-password", "Tr0ub4dor&3")
	b.waitHas(b2, true)
	f.waitRoute(f.ns["n2"], b1, "198.18.0.1")
	if !b.established("n1") || !b.established("n2") {
		t.Errorf("sessions not both Established:\n%s", b.show("show", "protocols"))
	}
}

// TestMeshPassword: a full mesh of Palisade nodes with nodeMeshPassword.
// GoBGP dials from one end and accepts on the other, so the accepting
// side's listener must carry the key (TCP MD5 on a Multipath TCP socket,
// Go's default for listeners, fails): every session comes up and the
// blocks are routed. A node whose secret file holds another password
// stays out of the mesh, and its session says so in the peer table.
func TestMeshPassword(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{
		NodeMeshPassword: &v3.BGPPassword{SecretKeyRef: &v3.SecretKeySelector{Name: "bgp-secrets", Key: "mesh"}},
	}})
	good, bad := t.TempDir(), t.TempDir()
	writeSecret(t, good, "bgp-secrets", "mesh", "Tr0ub4dor&3")
	writeSecret(t, bad, "bgp-secrets", "mesh", "correct horse")
	addrs := map[string]string{"n1": "198.18.0.1", "n2": "198.18.0.2", "n3": "198.18.0.3"}
	blocks := map[string]netip.Prefix{}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.node(n, addrs[n]+"/24", nil)
		blocks[n] = f.block(n)
	}
	f.start("n1", "-secrets", good)
	f.start("n2", "-secrets", good)
	f.start("n3", "-secrets", bad)
	f.waitRoute(f.ns["n1"], blocks["n2"], addrs["n2"])
	f.waitRoute(f.ns["n2"], blocks["n1"], addrs["n1"])
	// Both directions of the n1-n2 pair were accepted somewhere: the
	// session is up on both ends.
	for _, n := range []string{"n1", "n2"} {
		out := f.lab.Run("ip", "netns", "exec", f.ns[n], "gobgp", "-p", "50051", "neighbor")
		if strings.Count(out, "Establ") != 1 {
			t.Errorf("%s: want exactly its session with the other good node Established:\n%s", n, out)
		}
	}
	// n3's password is wrong: no route from or to it.
	for _, n := range []string{"n1", "n2"} {
		if out := f.routes(f.ns[n], blocks["n3"].String()); strings.Contains(out, "via") {
			t.Errorf("%s routes n3's block over a session with a wrong password: %s", n, out)
		}
	}
}

// TestPasswordLocalError: a node whose BGP listener cannot take the TCP
// MD5 key (forced here with GODEBUG=multipathtcp=2, Go's default for
// listeners before the agent turned it off) keeps its mesh sessions down
// and says why: the peer table (what `calicoctl node status` prints)
// names the local error, and the log carries it at warning level.
func TestPasswordLocalError(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{
		NodeMeshPassword: &v3.BGPPassword{Value: "Tr0ub4dor&3"},
	}})
	f.node("n1", "198.18.0.1/24", nil)
	f.node("n2", "198.18.0.2/24", nil)
	sock := filepath.Join(t.TempDir(), "peers.sock")
	f.startEnv("n1", []string{"GODEBUG=multipathtcp=2"}, "-peers", sock)
	f.startEnv("n2", []string{"GODEBUG=multipathtcp=2"})
	eventually(t, 20*time.Second, "n1's session with n2 names the local error", func() (bool, string) {
		ps, err := peerTable(sock)
		if err != nil {
			return false, err.Error()
		}
		return len(ps) == 1 && ps[0].State != "Established" && strings.Contains(ps[0].Reason, "Local error: setting the TCP MD5 password on the BGP listener") &&
			strings.Contains(ps[0].Reason, "protocol not available"), fmt.Sprintf("%+v", ps)
	})
	if log := f.log("n1"); !strings.Contains(log, "level=warning") || !strings.Contains(log, "failed to set md5") {
		t.Errorf("n1 did not log the MD5 failure as a warning:\n%s", log)
	}
}

// TestPasswordAccepted: BIRD dials in (n1 cannot dial out) with a TCP
// MD5 password; the session comes up only if n1's listener carries the
// key for BIRD's address.
func TestPasswordAccepted(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "rr"}, Spec: v3.BGPPeerSpec{
		PeerIP: "198.18.0.250", ASNumber: 64512, Password: &v3.BGPPassword{Value: "Tr0ub4dor&3"},
	}})
	b := f.startBird("rr", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
protocol bgp n1 { local 198.18.0.250 as 64512; neighbor 198.18.0.1 as 64512; rr client; password "Tr0ub4dor&3";
  connect retry time 1; error wait time 1, 2; ipv4 { import all; export all; }; }
`)
	f.node("n1", "198.18.0.1/24", nil)
	blk := f.block("n1")
	f.noDial("n1")
	f.start("n1")
	b.waitHas(blk, true)
}
