package bgp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/node/bgp/router"
)

// peerTable reads a testnode's session table from its -peers socket.
func peerTable(sock string) ([]router.PeerState, error) {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := hc.Get("http://testnode/peers")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", resp.Status)
	}
	var ps []router.PeerState
	return ps, json.NewDecoder(resp.Body).Decode(&ps)
}

// TestIPv6Mesh: n1 and n2 are dual stack, n3 IPv6 only (addresses in
// fd00:198:18::/64); with an IPv6 pool the mesh carries the /122 blocks
// over the IPv6 sessions and every node installs the others' blocks in its
// IPv6 table (and the IPv4 blocks of the dual-stack nodes in its IPv4
// table). The session table the status API reads lists the IPv6 mesh
// sessions Established.
func TestIPv6Mesh(t *testing.T) {
	t.Parallel()
	f := newFabric(t)
	// n3 reaches etcd over IPv6.
	f.lab.Run("ip", "-n", f.br, "addr", "add", "fd00:198:18::254/64", "dev", "br0", "nodad")
	const etcd6 = "[fd00:198:18::254]:2379"
	f.serveEtcd(etcd6)
	f.pool()
	f.apply(&v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "pods6"}, Spec: v3.IPPoolSpec{CIDR: "fd00:244::/48", BlockSize: 122}})
	type node struct{ v4, v6 string }
	nodes := map[string]node{
		"n1": {"198.18.0.1", "fd00:198:18::1"},
		"n2": {"198.18.0.2", "fd00:198:18::2"},
		"n3": {"", "fd00:198:18::3"},
	}
	names := []string{"n1", "n2", "n3"}
	blocks4, blocks6 := map[string]netip.Prefix{}, map[string]netip.Prefix{}
	socks := map[string]string{}
	for _, n := range names {
		a := nodes[n]
		spec := &v3.NodeBGPSpec{IPv6Address: a.v6 + "/64"}
		addrs := []string{a.v6 + "/64"}
		num4 := 0
		if a.v4 != "" {
			spec.IPv4Address = a.v4 + "/24"
			addrs = append(addrs, a.v4+"/24")
			num4 = 1
		}
		f.addNS(n, addrs...)
		f.apply(&v3.Node{ObjectMeta: v3.ObjectMeta{Name: n}, Spec: v3.NodeSpec{BGP: spec}})
		v4, v6, err := f.alloc.AutoAssign(context.Background(), ipam.AutoAssignArgs{Num4: num4, Num6: 1, Hostname: n, HandleID: "h-" + n})
		if err != nil || len(v6.IPs) != 1 || (num4 == 1 && len(v4.IPs) != 1) {
			t.Fatalf("assigning addresses to %s: %v", n, err)
		}
		blocks6[n] = v6.IPs[0].Masked()
		if num4 == 1 {
			blocks4[n] = v4.IPs[0].Masked()
		}
		socks[n] = filepath.Join(t.TempDir(), "peers.sock")
	}
	for _, n := range names {
		args := []string{"-peers", socks[n]}
		if nodes[n].v4 == "" {
			args = append(args, "-etcd", "http://"+etcd6)
		}
		f.start(n, args...)
	}
	for _, n := range names {
		for _, o := range names {
			if o == n {
				continue
			}
			f.waitRoute6(f.ns[n], blocks6[o], nodes[o].v6)
			if nodes[n].v4 != "" && nodes[o].v4 != "" {
				f.waitRoute(f.ns[n], blocks4[o], nodes[o].v4)
			}
		}
	}
	// Each node's own IPv6 block is a blackhole, never a learned route.
	for _, n := range names {
		out := f.ours6(f.ns[n], blocks6[n].String())
		if !strings.Contains(out, "blackhole "+blocks6[n].String()) {
			t.Errorf("%s: own block %s not a blackhole of protocol %s: %q", n, blocks6[n], proto, out)
		}
	}

	// The session table: n1 has IPv4 sessions to n2, IPv6 to n2 and n3,
	// all mesh, all Established.
	want := map[string]bool{"198.18.0.2": false, "fd00:198:18::2": true, "fd00:198:18::3": true}
	eventually(t, 20*time.Second, "n1's session table", func() (bool, string) {
		ps, err := peerTable(socks["n1"])
		if err != nil {
			return false, err.Error()
		}
		got := map[string]router.PeerState{}
		for _, p := range ps {
			got[p.Address.String()] = p
		}
		ok := len(ps) == len(want)
		for a, v6 := range want {
			p, found := got[a]
			ok = ok && found && p.Address.Is6() == v6 && p.State == "Established" &&
				p.Description == "node-to-node mesh" && !p.Since.IsZero()
		}
		return ok, fmt.Sprintf("%+v", ps)
	})
	// n3, IPv6 only, has no IPv4 session.
	ps, err := peerTable(socks["n3"])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if !p.Address.Is6() {
			t.Errorf("n3 (IPv6 only) has an IPv4 session: %+v", p)
		}
	}
	if len(ps) != 2 {
		t.Errorf("n3 has %d sessions, want 2: %+v", len(ps), ps)
	}
}

// waitRoute6 waits until ns routes the IPv6 prefix via gw with our
// protocol.
func (f *fabric) waitRoute6(ns string, pfx netip.Prefix, gw string) {
	f.t.Helper()
	eventually(f.t, 30*time.Second, fmt.Sprintf("%s: route %s via %s", ns, pfx, gw), func() (bool, string) {
		out := f.ours6(ns, pfx.String())
		return strings.Contains(out, "via "+gw+" "), out
	})
}
