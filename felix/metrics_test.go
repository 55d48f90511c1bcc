package felix

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/testsupport/promscrape"
)

// freePort is a loopback TCP port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// get fetches url and returns its status code and body (0 when nothing
// answers).
func get(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus waits until url answers code, and returns the body.
func waitStatus(t testing.TB, url string, code int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, body := get(url)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q after %s, want %d", url, got, body, within, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape parses a /metrics answer with expfmt.
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(url)
	if code != http.StatusOK {
		t.Fatalf("%s: %d %s", url, code, body)
	}
	fams, err := promscrape.Parse(body)
	if err != nil {
		t.Fatalf("parsing %s: %v\n%s", url, err, body)
	}
	return fams
}

// TestHealthAndMetrics runs a real felix whose etcd is reached through a
// relay: before it has read the datastore it is live and not ready; once
// in sync and programmed it is ready and /metrics (parsed back with
// expfmt) counts its endpoints, policies, IP sets, dataplane calls and
// the bad stored value; when etcd stops answering it is not ready, and
// ready again when etcd is back.
func TestHealthAndMetrics(t *testing.T) {
	c := newClusterNoFelix(t, "NFT", false)
	hp, mp := freePort(t), freePort(t)
	c.apply(fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.%s}
spec:
  healthEnabled: true
  healthHost: 127.0.0.1
  healthPort: %d
  prometheusMetricsEnabled: true
  prometheusMetricsHost: 127.0.0.1
  prometheusMetricsPort: %d
`, nodeName, hp, mp))
	c.apply(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web-8080, namespace: ns-a}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, source: {selector: app == 'client'}, destination: {ports: [8080]}}]
`)
	// A value that is not a resource: skipped and counted.
	raw := c.store.(*etcdv3.Store)
	if _, err := raw.Client().Put(c.ctx, datastore.ResourcePrefix+"networkpolicies/ns-a/garbage", "{not json"); err != nil {
		t.Fatal(err)
	}

	relay := etcdtest.StartRelay(t, c.endpoints[0])
	store := etcdtest.NewStore(t, []string{relay.Endpoint()})
	relay.Hang()
	cfg := c.felixConfigOf()
	cfg.Store = store
	runFelix(t, c.ctx, c.cancel, cfg)

	health := fmt.Sprintf("http://127.0.0.1:%d", hp)
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", mp)
	// Before it could read anything it serves nothing: the endpoints
	// follow FelixConfiguration, which it has not read yet.
	if code, _ := get(health + "/readiness"); code == http.StatusOK {
		t.Fatalf("ready before reading the datastore")
	}
	relay.Restore()
	c.addPod("ns-a", "web", "10.65.0.10", map[string]string{"app": "web"}, "sa-x")
	c.addPod("ns-a", "client", "10.65.0.11", map[string]string{"app": "client"}, "sa-x")
	body := waitStatus(t, health+"/readiness", http.StatusOK, 20*time.Second)
	if strings.TrimSpace(body) != "ok" {
		t.Errorf("readiness body %q, want ok", body)
	}
	waitStatus(t, health+"/liveness", http.StatusOK, time.Second)

	fams := scrape(t, metricsURL)
	for _, want := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"felix_active_local_endpoints", nil, 2},
		{"felix_active_local_policies", nil, 1},
		{"felix_active_local_selectors", nil, 1},
		{"felix_ipsets_calico", nil, 3},
		{"felix_ipset_members", nil, 1},
		{"felix_int_dataplane_apply_time_seconds", nil, 1},
		{"felix_calc_graph_update_time_seconds", nil, 1},
		{"felix_calc_graph_updates_processed", nil, 1},
		{"felix_ipset_calls", nil, 1},
		{"felix_iptables_save_calls", nil, 1},
		{"felix_resync_state_in_sync", nil, 1},
		{"felix_ready", nil, 1},
		{"palisade_datastore_bad_values_total", []string{"kind", "NetworkPolicy"}, 1},
		{"go_goroutines", nil, 1},
		{"process_cpu_seconds_total", nil, 0},
	} {
		if got := promscrape.Find(fams, want.name, want.labels...); got < want.min {
			t.Errorf("%s%v = %v, want at least %v", want.name, want.labels, got, want.min)
		}
	}
	if got := promscrape.Find(fams, "felix_active_local_endpoints"); got != 2 {
		t.Errorf("felix_active_local_endpoints = %v, want 2", got)
	}
	if calls := promscrape.Find(fams, "felix_iptables_restore_calls") + promscrape.Find(fams, "felix_nftables_netlink_calls"); calls < 1 {
		t.Errorf("no iptables-restore call nor netlink transaction counted")
	}
	if got := promscrape.Find(fams, "felix_iptables_restore_errors"); got != 0 {
		t.Errorf("felix_iptables_restore_errors = %v, want 0", got)
	}

	// etcd stops answering: not ready, still live; back: ready again.
	relay.Hang()
	body = waitStatus(t, health+"/readiness", http.StatusServiceUnavailable, 10*time.Second)
	if !strings.Contains(body, "datastore does not answer") {
		t.Errorf("readiness while etcd hangs: %q, want the datastore named", body)
	}
	waitStatus(t, health+"/liveness", http.StatusOK, time.Second)
	relay.Restore()
	waitStatus(t, health+"/readiness", http.StatusOK, 20*time.Second)
	if got := promscrape.Find(scrape(t, metricsURL), "felix_ready"); got != 1 && got != 0 {
		t.Errorf("felix_ready = %v", got)
	}

	// Turning health off closes the endpoint.
	c.apply(fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.%s}
spec:
  healthEnabled: false
  prometheusMetricsEnabled: true
  prometheusMetricsHost: 127.0.0.1
  prometheusMetricsPort: %d
`, nodeName, mp))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := get(health + "/liveness"); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the health endpoint still answers after healthEnabled: false")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRuleMetrics scrapes felix_policy_rule_packets_total and
// felix_policy_rule_bytes_total on the iptables and the eBPF dataplane:
// datagrams one flow each move the allowing and the denying rule's series
// by exactly what was sent, labelled with the policy's tier, namespace,
// name, direction, rule index and action; when the policy is deleted its
// series go.
func TestRuleMetrics(t *testing.T) {
	for _, dp := range []string{"NFT", "BPF"} {
		t.Run(dp, func(t *testing.T) {
			c := newClusterNoFelix(t, dp, false)
			mp := freePort(t)
			c.apply(fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.%s}
spec: {prometheusMetricsEnabled: true, prometheusMetricsHost: 127.0.0.1, prometheusMetricsPort: %d}
`, nodeName, mp))
			runFelix(t, c.ctx, c.cancel, c.felixConfigOf())
			c.addPod("ns-a", "web", "10.65.0.1", map[string]string{"app": "web"}, "sa-w")
			c.addPod("ns-a", "client", "10.65.0.2", map[string]string{"app": "client"}, "sa-x")
			rs := c.apply(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: ns-a}
spec:
  selector: app == 'web'
  types: [Ingress]
  ingress:
  - {action: Allow, protocol: UDP, source: {selector: app == 'client'}, destination: {ports: [8080]}}
  - {action: Deny, protocol: UDP, destination: {ports: [9000]}}
`)
			c.waitPolicies(rs, true)
			c.expect(probe{from: "client", to: "web", proto: "udp", port: 8080, allowed: true})
			url := fmt.Sprintf("http://127.0.0.1:%d/metrics", mp)
			waitStatus(t, url, http.StatusOK, 20*time.Second)
			labels := func(i int, action string) []string {
				return []string{"kind", "NetworkPolicy", "tier", "default", "namespace", "ns-a", "name", "web",
					"direction", "ingress", "rule_index", fmt.Sprint(i), "action", action}
			}
			series := func(fams map[string]*dto.MetricFamily) (p0, b0, p1, b1 float64) {
				return promscrape.Find(fams, "felix_policy_rule_packets_total", labels(0, "Allow")...), promscrape.Find(fams, "felix_policy_rule_bytes_total", labels(0, "Allow")...),
					promscrape.Find(fams, "felix_policy_rule_packets_total", labels(1, "Deny")...), promscrape.Find(fams, "felix_policy_rule_bytes_total", labels(1, "Deny")...)
			}
			p0, b0, p1, b1 := series(scrape(t, url))
			if p0 < 1 || p1 < 0 {
				t.Fatalf("before: rule 0 %v packets (want >= 1, the probe), rule 1 %v (want a series)", p0, p1)
			}
			_, webIP, _ := c.endpoint("web", false)
			const size = 50
			sendUDP(t, c.pods["client"].run, webIP, 8080, 4, size)
			sendUDP(t, c.pods["client"].run, webIP, 9000, 6, size)
			q0, c0, q1, c1 := series(scrape(t, url))
			if q0-p0 != 4 || c0-b0 != 4*(28+size) || q1-p1 != 6 || c1-b1 != 6*(28+size) {
				t.Errorf("moved: rule 0 by %v packets %v bytes (want 4, %d); rule 1 by %v packets %v bytes (want 6, %d)",
					q0-p0, c0-b0, 4*(28+size), q1-p1, c1-b1, 6*(28+size))
			}
			c.remove(rs)
			c.waitPolicies(rs, false)
			c.waitFor("the deleted policy's series to go", func() bool {
				f := scrape(t, url)
				return promscrape.Find(f, "felix_policy_rule_packets_total", "name", "web") < 0 && promscrape.Find(f, "felix_policy_rule_bytes_total", "name", "web") < 0
			})
		})
	}
}
