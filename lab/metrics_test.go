package lab

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/testsupport/promscrape"
	dto "github.com/prometheus/client_model/go"
)

// scrapeIn fetches http://127.0.0.1:<port>/metrics inside a node's
// namespace and parses it.
func scrapeIn(l *Lab, node string, port int) (map[string]*dto.MetricFamily, error) {
	hc := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := l.InNamespace(node, func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	return promscrape.Get(&hc, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
}

// runProbe runs calico-node with probe flags on a node and returns its exit
// code and its one line.
func runProbe(t testing.TB, l *Lab, node string, flags ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code, err := l.Exec(context.Background(), node, append([]string{"calico-node"}, flags...), nil, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	return code, strings.TrimSpace(out.String())
}

// TestMetricsAndProbes: with Calico's variables turned on, every
// calico-node serves felix's health and metrics and the BGP metrics;
// -felix-ready and -bird-ready pass once the mesh is up and routes are
// programmed; a configured peer that never comes up fails -bird-ready,
// naming it; when etcd goes away -felix-ready fails (naming the
// datastore) while -felix-live and -bird-ready pass, and it passes again
// once etcd is back. Exposition is parsed back with expfmt.
func TestMetricsAndProbes(t *testing.T) {
	l := newLab(t, Options{Nodes: 2, Peering: PeeringMesh, Etcd: EtcdExternal, Metrics: true})
	ctx := context.Background()
	p1, err := l.AddPod(ctx, "node1", "mx", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddPod(ctx, "node2", "mx", "b"); err != nil {
		t.Fatal(err)
	}
	expect := func(node string, code int, contains string, within time.Duration, flags ...string) {
		t.Helper()
		waitFor(t, within, fmt.Sprintf("%s: calico-node %s exits %d (%q)", node, strings.Join(flags, " "), code, contains), func() (bool, string) {
			got, line := runProbe(t, l, node, flags...)
			return got == code && strings.Contains(line, contains) && !strings.Contains(line, "\n"), fmt.Sprintf("exit %d: %s", got, line)
		})
	}
	for _, n := range []string{"node1", "node2"} {
		expect(n, 0, "ok", 30*time.Second, "-felix-live", "-felix-ready")
		expect(n, 0, "ok", 30*time.Second, "-bird-live", "-bird-ready")
	}

	// felix's metrics (9091).
	fams, err := scrapeIn(l, "node1", 9091)
	if err != nil {
		t.Fatal(err)
	}
	for name, min := range map[string]float64{"felix_active_local_endpoints": 1, "felix_ipsets_calico": 1, "felix_resync_state_in_sync": 1,
		"go_goroutines": 1, "process_resident_memory_bytes": 1} {
		if v, ok := promscrape.Value(fams, name); !ok || v < min {
			t.Errorf("node1 %s = %v (present %t), want at least %v", name, v, ok, min)
		}
	}
	if v, _ := promscrape.Value(fams, "felix_active_local_endpoints"); v != 1 {
		t.Errorf("node1 felix_active_local_endpoints = %v, want 1 (pod %s)", v, p1.Key())
	}

	// BGP metrics (9900): node2 is an Established peer that sent node1
	// its block, and the route is programmed.
	n2, _ := l.Node("node2")
	peer := n2.IP.String()
	waitFor(t, 10*time.Second, "node1's BGP metrics show node2's route", func() (bool, string) {
		fams, err := scrapeIn(l, "node1", 9900)
		if err != nil {
			return false, err.Error()
		}
		up, _ := promscrape.Value(fams, "bgp_peer_up", "peer", peer)
		recv, _ := promscrape.Value(fams, "bgp_peer_routes_received", "peer", peer)
		adv, _ := promscrape.Value(fams, "bgp_peer_routes_advertised", "peer", peer)
		uptime, _ := promscrape.Value(fams, "bgp_peer_session_uptime_seconds", "peer", peer)
		_, age := promscrape.Value(fams, "bgp_peer_last_update_age_seconds", "peer", peer)
		est, _ := promscrape.Value(fams, "bgp_peers", "status", "Established", "ip_version", "IPv4")
		wanted, _ := promscrape.Value(fams, "bgp_routes_wanted")
		prog, _ := promscrape.Value(fams, "bgp_routes_programmed")
		state := fmt.Sprintf("up %v, received %v, advertised %v, uptime %v, last update seen %t, established %v, routes %v/%v",
			up, recv, adv, uptime, age, est, prog, wanted)
		return up == 1 && recv >= 1 && adv >= 1 && uptime > 0 && age && est == 1 && wanted >= 1 && prog == wanted, state
	})

	// A configured peer that never answers: node1 is not BGP-ready.
	if err := l.Apply(ctx, `apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: absent}
spec: {node: node1, peerIP: 198.18.0.240, asNumber: 64999}
`); err != nil {
		t.Fatal(err)
	}
	expect("node1", 1, "BGP not established with 198.18.0.240", 15*time.Second, "-bird-ready")
	expect("node1", 0, "ok", 5*time.Second, "-bird-live")
	if _, err := l.Calicoctl(ctx, "node1", nil, "delete", "bgppeer", "absent"); err != nil {
		t.Fatal(err)
	}
	expect("node1", 0, "ok", 15*time.Second, "-bird-ready")

	// etcd goes away: felix is not ready, says why, stays live; BGP
	// keeps forwarding and stays ready.
	if err := l.StopEtcd("etcd", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	expect("node1", 1, "datastore does not answer", 20*time.Second, "-felix-ready")
	expect("node1", 0, "ok", 5*time.Second, "-felix-live")
	expect("node1", 0, "ok", 5*time.Second, "-bird-ready")
	if err := l.StartEtcd(ctx, "etcd"); err != nil {
		t.Fatal(err)
	}
	expect("node1", 0, "ok", 30*time.Second, "-felix-ready")
}
