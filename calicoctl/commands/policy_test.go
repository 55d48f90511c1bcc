package commands_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
)

// TestPolicyExplainGolden explains packets over a catalogue of policies
// (testdata/explain/catalogue.yaml: tiers, Pass, Log, Deny, tier
// defaults, profiles, named ports, ranges, notPorts, nets, notNets,
// notSelector, namespace selectors, service accounts, network sets, ICMP,
// rules felix cannot enforce, a host endpoint with failsafe ports, host
// and workload-to-host traffic) and compares each output with its golden
// file.
func TestPolicyExplainGolden(t *testing.T) {
	c := catalogueCluster(t)
	cases := []struct {
		name    string
		args    []string
		verdict calc.Verdict
	}{
		{"frontend-to-web-named-port", []string{"--from", "shop/cart", "--to", "shop/web", "--port", "8080"}, calc.VerdictAllow},
		{"frontend-to-web-denied-range", []string{"--from", "shop/cart", "--to", "shop/web", "--port", "8081"}, calc.VerdictDeny},
		{"admin-passed-to-web-ssh", []string{"--from", "ops/admin", "--to", "shop/web", "--port", "22"}, calc.VerdictDeny},
		{"admin-passed-to-web-80", []string{"--from", "ops/admin", "--to", "10.65.0.10", "--port", "80"}, calc.VerdictAllow},
		{"web-to-db-across-nodes", []string{"--from", "shop/web", "--to", "shop/db", "--port", "5432"}, calc.VerdictAllow},
		{"cart-to-db-not-selected", []string{"--from", "10.65.0.11", "--to", "shop/db", "--port", "5432", "--source-port", "40000"}, calc.VerdictDeny},
		{"web-to-partners", []string{"--from", "shop/web", "--to", "203.0.113.7", "--port", "443"}, calc.VerdictAllow},
		{"web-to-partners-excluded", []string{"--from", "shop/web", "--to", "203.0.113.200", "--port", "443"}, calc.VerdictDeny},
		{"web-to-own-host-dns", []string{"--from", "shop/web", "--to", "198.18.0.1", "--protocol", "udp", "--port", "53"}, calc.VerdictDeny},
		{"admin-ping-web", []string{"--from", "ops/admin", "--to", "shop/web", "--protocol", "icmp"}, calc.VerdictAllow},
		{"cart-to-host-failsafe", []string{"--from", "shop/cart", "--to", "node-b-eth0", "--port", "22"}, calc.VerdictAllow},
		{"cart-to-host-denied", []string{"--from", "shop/cart", "--to", "198.18.0.2", "--port", "2222"}, calc.VerdictDeny},
		{"host-to-own-workload", []string{"--from", "198.18.0.1", "--to", "shop/web", "--port", "80"}, calc.VerdictAllow},
		{"outside-to-web", []string{"--from", "192.0.2.5", "--to", "shop/web", "--port", "8080", "--protocol", "TCP"}, calc.VerdictDeny},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"policy", "explain"}, tc.args...)
			out := c.mustRun(t, "", args...)
			golden(t, "policy-explain-"+tc.name+".txt", out)
			var x calc.Explanation
			if err := json.Unmarshal([]byte(c.mustRun(t, "", append(args, "-o", "json")...)), &x); err != nil {
				t.Fatalf("-o json: %v", err)
			}
			if x.Verdict != tc.verdict {
				t.Errorf("verdict %s, want %s", x.Verdict, tc.verdict)
			}
		})
	}
	golden(t, "policy-explain-frontend-to-web-named-port.json",
		c.mustRun(t, "", "policy", "explain", "--from", "shop/cart", "--to", "shop/web", "--port", "8080", "-o", "json"))
}

// TestPolicyExplainBadInput: every wrong question is named and exits 1,
// printing nothing on standard output.
func TestPolicyExplainBadInput(t *testing.T) {
	c := catalogueCluster(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no such pod", []string{"--from", "shop/nope", "--to", "shop/web", "--port", "80"}, `--from shop/nope: no pod "nope" (nor WorkloadEndpoint of that name) in namespace "shop"`},
		{"no such namespace", []string{"--from", "shop/web", "--to", "nowhere/web", "--port", "80"}, `no pod "web" (nor WorkloadEndpoint of that name) in namespace "nowhere"`},
		{"no such host endpoint", []string{"--from", "node-z-eth0", "--to", "shop/web", "--port", "80"}, `no HostEndpoint "node-z-eth0"`},
		{"an address no endpoint holds", []string{"--from", "10.65.9.9", "--to", "shop/web", "--port", "80"}, "--from 10.65.9.9: in IP pool pods (10.65.0.0/16), but no endpoint holds it"},
		{"a bad address", []string{"--from", "10.65.0.300", "--to", "shop/web", "--port", "80"}, `--from "10.65.0.300": not an IP address`},
		{"an unsupported protocol", []string{"--from", "shop/cart", "--to", "shop/web", "--protocol", "gre"}, `unsupported protocol "gre"`},
		{"protocol 0", []string{"--from", "shop/cart", "--to", "shop/web", "--protocol", "0"}, `unsupported protocol "0"`},
		{"no port for tcp", []string{"--from", "shop/cart", "--to", "shop/web"}, "--port is required for protocol tcp"},
		{"a port for icmp", []string{"--from", "shop/cart", "--to", "shop/web", "--protocol", "icmp", "--port", "80"}, "protocol icmp has no ports"},
		{"a port out of range", []string{"--from", "shop/cart", "--to", "shop/web", "--port", "70000"}, "--port 70000: want 1-65535"},
		{"icmpv6 to an IPv4 pod", []string{"--from", "shop/cart", "--to", "shop/web", "--protocol", "icmpv6"}, "protocol icmpv6 is not of IPv4"},
		{"no --to", []string{"--from", "shop/cart", "--port", "80"}, `required flag(s) "to" not set`},
		{"a bad output", []string{"--from", "shop/cart", "--to", "shop/web", "--port", "80", "-o", "wide"}, "unrecognized output format 'wide'"},
		{"no node running", []string{"--from", "shop/cart", "--to", "shop/web", "--port", "80", "--at-node", "node-a", "--run-dir", t.TempDir()}, "no calico-node answers on"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.run(t, "", nil, append([]string{"policy", "explain"}, tc.args...)...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want a non-zero exit saying %q", r.code, r.stdout, r.stderr, tc.want)
			}
		})
	}
	r := c.run(t, "", nil, "policy", "stats", "--run-dir", t.TempDir())
	if r.code == 0 || !strings.Contains(r.stderr, "asking calico-node on") {
		t.Errorf("stats with no node: exit %d, stderr %q", r.code, r.stderr)
	}
}

// catalogueCluster is a cluster holding the explain catalogue
// (testdata/explain/catalogue.yaml).
func catalogueCluster(t *testing.T) *cluster {
	t.Helper()
	c := newCluster(t)
	cat, err := os.ReadFile(filepath.Join("..", "testdata", "explain", "catalogue.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.mustRun(t, string(cat), "apply", "-f", "-")
	return c
}
