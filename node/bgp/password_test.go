package bgp_test

import (
	"os"
	"path/filepath"
	"testing"

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
