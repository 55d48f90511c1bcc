package bgp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// quietBytes is what etcd may send a speaker in quietWindow while nothing
// changes: a single list of a kind is more.
const (
	quietWindow = 3 * time.Second
	quietBytes  = 256
)

// TestInputsTakeEffect: n1's speaker, with calico-node's poll interval of
// one second, reads nothing from etcd while the cluster is quiet (its
// inputs are watched; before, it listed every kind every second), and a
// change of each input it reads takes effect within a second or two
// (docs/bgp.md promises a second): a BGPPeer, its password file, a
// BGPFilter, an interface a BGPFilter rule names, a Node, the
// BGPConfiguration, an IPPool, an IPAM block, a WorkloadEndpoint's
// floating IP, and the FelixConfiguration that enables floating IPs.
func TestInputsTakeEffect(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	f.pool()
	secrets := t.TempDir()
	writeSecret(t, secrets, "bgp-secrets", "tor", "first")
	f.node("n1", "198.18.0.1/24", nil)
	blk := f.block("n1")
	f.start("n1", "-poll", "1s", "-secrets", secrets)
	hasPath := func(pfx netip.Prefix, want bool) func() (bool, string) {
		return func() (bool, string) {
			ps, err := f.paths("n1", pfx)
			if err != nil {
				return false, err.Error()
			}
			return (len(ps) > 0) == want, fmt.Sprintf("paths for %s: %+v", pfx, ps)
		}
	}
	eventually(t, 30*time.Second, "n1 advertising its block", hasPath(blk, true))

	quiet := func(when string) {
		t.Helper()
		time.Sleep(time.Second) // the last change's round
		before := f.etcdSent.Load()
		time.Sleep(quietWindow)
		if sent := f.etcdSent.Load() - before; sent > quietBytes {
			t.Errorf("%s: etcd sent n1 %d bytes in %s of a quiet cluster, want ≤ %d (no reads)", when, sent, quietWindow, quietBytes)
		}
	}
	quiet("after start")

	neighbor := func(addr string, check func(password string) bool) func() (bool, string) {
		return func() (bool, string) {
			var ns []struct {
				Conf struct {
					Address  string `json:"neighbor_address"`
					Password string `json:"auth_password"`
				} `json:"conf"`
			}
			if err := f.gobgpJSON("n1", &ns, "neighbor"); err != nil {
				return false, err.Error()
			}
			for _, n := range ns {
				if n.Conf.Address == addr {
					return check(n.Conf.Password), fmt.Sprintf("%+v", ns)
				}
			}
			return false, fmt.Sprintf("no neighbor %s: %+v", addr, ns)
		}
	}
	policyHas := func(want ...string) func() (bool, string) {
		return func() (bool, string) {
			out, err := f.gobgpRaw("n1", "policy")
			if err != nil {
				return false, err.Error()
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					return false, out
				}
			}
			return true, out
		}
	}
	svc := netip.MustParsePrefix("10.96.0.0/12")
	floating := netip.MustParsePrefix("10.244.255.5/32")
	var blk2 netip.Prefix
	wep := &v3.WorkloadEndpoint{ObjectMeta: v3.ObjectMeta{Name: "n1-k8s-pod1-eth0", Namespace: "default"}, Spec: v3.WorkloadEndpointSpec{
		Orchestrator: "k8s", Node: "n1", Pod: "pod1", Endpoint: "eth0", InterfaceName: "cali0123456789a",
		IPNetworks: []string{"10.244.0.9/32"}, IPNATs: []v3.IPNAT{{InternalIP: "10.244.0.9", ExternalIP: floating.Addr().String()}}}}
	filter := &v3.BGPFilter{ObjectMeta: v3.ObjectMeta{Name: "f1"}, Spec: v3.BGPFilterSpec{
		ExportV4: []v3.BGPFilterRuleV4{{Action: v3.BGPFilterAccept, MatchOperator: v3.MatchOperatorIn, CIDR: "10.96.0.0/12"}},
		ImportV4: []v3.BGPFilterRuleV4{{Action: v3.BGPFilterReject, Interface: "ext*"}},
	}}
	steps := []struct {
		input  string
		change func()
		effect func() (bool, string)
	}{
		{"BGPPeer", func() {
			f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "tor"}, Spec: v3.BGPPeerSpec{Node: "n1", PeerIP: "198.18.0.250", ASNumber: 65001,
				Filters:  []string{"f1"},
				Password: &v3.BGPPassword{SecretKeyRef: &v3.SecretKeySelector{Name: "bgp-secrets", Key: "tor"}}}})
		}, neighbor("198.18.0.250", func(pw string) bool { return pw == "first" })},
		{"password file", func() { writeSecret(t, secrets, "bgp-secrets", "tor", "second\n") },
			neighbor("198.18.0.250", func(pw string) bool { return pw == "second" })},
		{"BGPFilter", func() { f.apply(filter) }, policyHas("palisade-198.18.0.250-f1-export-v4-0")},
		{"interface", func() {
			f.lab.Run("ip", "-n", f.ns["n1"], "link", "add", "ext0", "type", "veth", "peer", "name", "ext1")
			f.lab.Run("ip", "-n", f.ns["n1"], "addr", "add", "198.19.7.1/24", "dev", "ext0")
		}, policyHas("palisade-198.18.0.250-f1-import-v4-0", "198.19.7.0/24")},
		{"Node", func() {
			f.apply(&v3.Node{ObjectMeta: v3.ObjectMeta{Name: "n2"}, Spec: v3.NodeSpec{BGP: &v3.NodeBGPSpec{IPv4Address: "198.18.0.2/24"}}})
		}, neighbor("198.18.0.2", func(string) bool { return true })},
		{"BGPConfiguration", func() {
			f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{
				ServiceClusterIPs: []v3.ServiceClusterIPBlock{{CIDR: svc.String()}}}})
		}, hasPath(svc, true)},
		{"IPPool", func() {
			f.apply(&v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "pods"}, Spec: v3.IPPoolSpec{CIDR: "10.244.0.0/16", BlockSize: 26, DisableBGPExport: true}})
		}, hasPath(blk, false)},
		{"IPPool again", func() { f.pool() }, hasPath(blk, true)},
		{"IPAM block", func() {
			v4, _, err := f.alloc.AutoAssign(context.Background(), ipam.AutoAssignArgs{Num4: 64, Hostname: "n1", HandleID: "h-n1-more"})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range v4.IPs {
				if !blk.Contains(a.Addr()) {
					blk2 = a.Masked()
				}
			}
			if !blk2.IsValid() {
				t.Fatal("no second block claimed")
			}
		}, func() (bool, string) { return hasPath(blk2, true)() }},
		{"WorkloadEndpoint (floating IPs off)", func() { f.apply(wep) }, func() (bool, string) {
			// Nothing to see: floating IPs are off. The next step times
			// the FelixConfiguration.
			return true, ""
		}},
		{"FelixConfiguration", func() {
			f.apply(&v3.FelixConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.FelixConfigurationSpec{FloatingIPs: "Enabled"}})
		}, hasPath(floating, true)},
		{"WorkloadEndpoint deleted", func() {
			if _, err := f.store.Delete(context.Background(), datastore.KeyOf(wep), ""); err != nil {
				t.Fatal(err)
			}
		}, hasPath(floating, false)},
	}
	for _, s := range steps {
		start := time.Now()
		s.change()
		var last string
		ok := false
		for time.Since(start) < 10*time.Second {
			if ok, last = s.effect(); ok {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		took := time.Since(start)
		switch {
		case !ok:
			t.Fatalf("%s: no effect after %s; last state:\n%s", s.input, took.Round(time.Millisecond), last)
		case took > 2*time.Second:
			t.Errorf("%s: took effect after %s, want within a second or two", s.input, took.Round(time.Millisecond))
		default:
			t.Logf("%s: took effect after %s", s.input, took.Round(time.Millisecond))
		}
	}
	quiet("after the changes")
}

// gobgpRaw runs the gobgp CLI against a node's speaker.
func (f *fabric) gobgpRaw(node string, args ...string) (string, error) {
	var raw json.RawMessage
	if err := f.gobgpJSON(node, &raw, args...); err != nil {
		return "", err
	}
	return string(raw), nil
}
