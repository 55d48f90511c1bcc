package commands_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// ipamResources are the pool, nodes and endpoints of the IPAM tests: two
// of the four allocations below have an endpoint, one of those is on a
// node that does not exist.
const ipamResources = `
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-a}
spec: {cidr: 10.10.0.0/24, blockSize: 26}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool-v6}
spec: {cidr: "fd00:10::/48"}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-b}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--a-k8s-web--1-eth0, namespace: default}
spec: {node: node-a, orchestrator: k8s, pod: web-1, endpoint: eth0, containerID: c1, interfaceName: cali1111, ipNetworks: [10.10.0.1/32]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--b-k8s-api--1-eth0, namespace: default}
spec: {node: node-b, orchestrator: k8s, pod: api-1, endpoint: eth0, containerID: c4, interfaceName: cali4444, ipNetworks: [10.10.0.5/32]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--gone-k8s-db--1-eth0, namespace: default}
spec: {node: node-gone, orchestrator: k8s, pod: db-1, endpoint: eth0, containerID: c3, interfaceName: cali3333, ipNetworks: [10.10.0.130/32]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--a-k8s-twin-eth0, namespace: default}
spec: {node: node-a, orchestrator: k8s, pod: twin, endpoint: eth0, containerID: c5, interfaceName: cali5555, ipNetworks: [10.10.0.1/32]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--a-k8s-ghost-eth0, namespace: default}
spec: {node: node-a, orchestrator: k8s, pod: ghost, endpoint: eth0, containerID: c6, interfaceName: cali6666, ipNetworks: [10.10.0.7/32]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--a-k8s-outside-eth0, namespace: default}
spec: {node: node-a, orchestrator: k8s, pod: outside, endpoint: eth0, containerID: c7, interfaceName: cali7777, ipNetworks: [192.0.2.9/32]}
`

// ipamClusterInfo is the ClusterInformation of the IPAM tests, written
// straight into etcd as calico-node writes it.
const ipamClusterInfo = `{"kind":"ClusterInformation","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},` +
	`"spec":{"clusterGUID":"0123456789abcdef0123456789abcdef","clusterType":"palisade","datastoreReady":true}}`

// newIPAMCluster loads ipamResources and makes the allocations:
// 10.10.0.1 (web-1, in use, and claimed by endpoint twin as well),
// 10.10.0.2 (web-2, no endpoint: leaked), 10.10.0.5 (api-1 on node-b,
// borrowed from node-a's block) and 10.10.0.130 (db-1 on node-gone, whose
// block is affine to it). Endpoint ghost uses 10.10.0.7, which is not
// allocated, and endpoint outside 192.0.2.9, in no pool. Handle
// k8s-pod-network.stale holds no address; the record of api-1's handle is
// missing.
func newIPAMCluster(t *testing.T) (*cluster, *ipam.Allocator) {
	t.Helper()
	c := newCluster(t)
	c.mustRun(t, ipamResources, "apply", "-f", "-")
	ctx := context.Background()
	if _, err := c.raw.Put(ctx, datastore.ResourcePrefix+"clusterinformations/default", ipamClusterInfo); err != nil {
		t.Fatal(err)
	}
	s, err := etcdv3.New(context.Background(), etcdv3.Config{Endpoints: c.endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	alloc := ipam.New(s, s.KV())
	for _, al := range []struct{ ip, host, node, pod, cid string }{
		{"10.10.0.1", "node-a", "node-a", "web-1", "c1"},
		{"10.10.0.2", "node-a", "node-a", "web-2", "c2"},
		{"10.10.0.5", "node-a", "node-b", "api-1", "c4"},
		{"10.10.0.130", "node-gone", "node-gone", "db-1", "c3"},
	} {
		err := alloc.AssignIP(context.Background(), ipam.AssignIPArgs{
			IP: netip.MustParseAddr(al.ip), HandleID: "k8s-pod-network." + al.cid, Hostname: al.host,
			Attrs: map[string]string{"namespace": "default", "pod": al.pod, "node": al.node},
		})
		if err != nil {
			t.Fatalf("assigning %s: %v", al.ip, err)
		}
	}
	if _, err := c.raw.Put(ctx, datastore.IPAMPrefix+"handle/k8s-pod-network.stale",
		`{"handleID":"k8s-pod-network.stale","block":{"10.10.0.0/26":1},"deleted":false}`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.raw.Delete(ctx, datastore.IPAMPrefix+"handle/k8s-pod-network.c4"); err != nil {
		t.Fatal(err)
	}
	return c, alloc
}

func TestIPAMShowGolden(t *testing.T) {
	c, _ := newIPAMCluster(t)
	tests := []struct {
		golden string
		args   []string
	}{
		{"ipam-show.txt", []string{"ipam", "show"}},
		{"ipam-show-blocks.txt", []string{"ipam", "show", "--show-blocks"}},
		{"ipam-show-borrowed.txt", []string{"ipam", "show", "--show-borrowed"}},
		{"ipam-show-configuration.txt", []string{"ipam", "show", "--show-configuration"}},
		{"ipam-show-ip-in-use.txt", []string{"ipam", "show", "--ip=10.10.0.1"}},
		{"ipam-show-ip-free.txt", []string{"ipam", "show", "--ip=10.10.0.9"}},
		{"ipam-check.txt", []string{"ipam", "check"}},
		{"ipam-check-problem-ips.txt", []string{"ipam", "check", "--show-problem-ips"}},
		{"ipam-check-all-ips.txt", []string{"ipam", "check", "--show-all-ips"}},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			golden(t, tc.golden, c.mustRun(t, "", tc.args...))
		})
	}
}

func TestIPAMBadInput(t *testing.T) {
	c, _ := newIPAMCluster(t)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"show bad IP", []string{"ipam", "show", "--ip=10.10.0.300"}, `invalid IP address "10.10.0.300"`},
		{"show IP in no pool", []string{"ipam", "show", "--ip=192.0.2.1"}, "IP 192.0.2.1 is not in any configured IP pool"},
		{"release without --ip", []string{"ipam", "release"}, "--ip is required"},
		{"release bad IP", []string{"ipam", "release", "--ip=nonsense"}, `invalid IP address "nonsense"`},
		{"release IP in no pool", []string{"ipam", "release", "--ip=192.0.2.1"}, "IP address 192.0.2.1 is not in any configured IP pool"},
		{"release unassigned IP", []string{"ipam", "release", "--ip=10.10.0.9"}, "IP address 10.10.0.9 is not assigned"},
		{"configure nothing", []string{"ipam", "configure"}, "nothing to configure"},
		{"configure bad bool", []string{"ipam", "configure", "--strictaffinity=maybe"}, `--strictaffinity="maybe": must be true or false`},
		{"configure negative max", []string{"ipam", "configure", "--max-blocks-per-host=-1"}, "must not be negative"},
		{"release from a missing report", []string{"ipam", "release", "--from-report=/nonexistent/report.json"}, "reading report: open /nonexistent/report.json"},
		{"release by IP and report", []string{"ipam", "release", "--ip=10.10.0.2", "--from-report=/nonexistent/report.json"}, "give either --ip or --from-report, not both"},
	}
	before := c.dump(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.run(t, "", nil, tc.args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.wantErr) {
				t.Errorf("calicoctl %s: exit %d, stderr %q; want a non-zero exit and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.wantErr)
			}
		})
	}
	if after := c.dump(t); len(after) != len(before) {
		t.Errorf("bad input changed the datastore: %d resources before, %d after", len(before), len(after))
	}
}

// TestIPAMCheckAndReleaseFromReport: the report says what Calico's does
// (golden), and release --from-report frees what it calls leaked after
// Calico's checks: the datastore must be locked unless --force, the
// report of this cluster (never overridden) and calicoctl version, one
// report current; with several reports only what all call leaked goes;
// an address reassigned since the report is left alone.
func TestIPAMCheckAndReleaseFromReport(t *testing.T) {
	c, alloc := newIPAMCluster(t)
	ctx := context.Background()
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	c.mustRun(t, "", "ipam", "check", "-o", report)
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ipam-check-report.json", reportMask(string(raw)))

	edited := func(name string, edit func(map[string]any)) string {
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		edit(doc)
		data, _ := json.Marshal(doc)
		return writeFile(t, dir, name, string(data))
	}
	for _, tc := range []struct {
		name, file string
		force      bool
		wantErr    string
	}{
		{"not locked", report, false, "data store is not locked. Either lock the data store, or re-run with --force"},
		{"other cluster", edited("guid.json", func(d map[string]any) { d["clusterGUID"] = "ffff" }), true,
			"mismatched cluster GUID. Refusing to release"},
		{"other version", edited("version.json", func(d map[string]any) { d["version"] = "v0.0.1" }), false,
			"was produced using a different version (v0.0.1) of calicoctl. Refusing to release"},
		{"stale", edited("stale.json", func(d map[string]any) { d["clusterInformationRevision"] = "1" }), true,
			"the provided reports are all stale"},
	} {
		args := []string{"ipam", "release", "--from-report=" + tc.file}
		if tc.force {
			args = append(args, "--force")
		}
		if r := c.run(t, "", nil, args...); r.code == 0 || !strings.Contains(r.stderr, tc.wantErr) {
			t.Errorf("%s: exit %d, stderr %q; want a non-zero exit and %q", tc.name, r.code, r.stderr, tc.wantErr)
		}
	}
	if _, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr("10.10.0.2")); err != nil {
		t.Fatalf("a refused release freed 10.10.0.2: %v", err)
	}

	// A second leak after the first report, in the second only.
	if err := alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: netip.MustParseAddr("10.10.0.3"), HandleID: "k8s-pod-network.c8",
		Hostname: "node-a", Attrs: map[string]string{"namespace": "default", "pod": "late", "node": "node-a"}}); err != nil {
		t.Fatal(err)
	}
	report2 := filepath.Join(dir, "report2.json")
	c.mustRun(t, "", "ipam", "check", "-o", report2)
	out := c.mustRun(t, "", "ipam", "release", "--from-report="+report, "--from-report="+report2, "--force")
	golden(t, "ipam-release-from-report.txt", out)
	for ip, wantHeld := range map[string]bool{"10.10.0.2": false, "10.10.0.3": true, "10.10.0.1": true} {
		_, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr(ip))
		if held := err == nil; held != wantHeld {
			t.Errorf("after release from two reports: %s held %t, want %t", ip, held, wantHeld)
		}
	}
	hs, _ := alloc.ListHandles(ctx)
	for _, h := range hs {
		if h.ID == "k8s-pod-network.stale" {
			t.Errorf("the leaked handle is still stored")
		}
	}

	// 10.10.0.3 released and handed to someone else since report2: its
	// release from report2 leaves the new holder alone, and so does one
	// from report2 and a newer report that sees the new holder.
	if _, err := alloc.ReleaseIPs(ctx, netip.MustParseAddr("10.10.0.3")); err != nil {
		t.Fatal(err)
	}
	if err := alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: netip.MustParseAddr("10.10.0.3"), HandleID: "k8s-pod-network.c9",
		Hostname: "node-a"}); err != nil {
		t.Fatal(err)
	}
	out = c.mustRun(t, "", "ipam", "release", "--from-report="+report2, "--force")
	if !strings.Contains(out, "2 addresses marked as leaked in the report had already been cleaned up") {
		t.Errorf("release of a reassigned address printed:\n%s", out)
	}
	report3 := filepath.Join(dir, "report3.json")
	c.mustRun(t, "", "ipam", "check", "-o", report3)
	out = c.mustRun(t, "", "ipam", "release", "--from-report="+report2, "--from-report="+report3, "--force")
	if !strings.Contains(out, "Report didn't contain any leaked IPs to clean up.") {
		t.Errorf("release from reports that saw two holders of 10.10.0.3 printed:\n%s", out)
	}
	if a, err := alloc.GetAssignmentAttributes(ctx, netip.MustParseAddr("10.10.0.3")); err != nil || a.HandleID != "k8s-pod-network.c9" {
		t.Errorf("release from an old report freed 10.10.0.3 of its new holder: %+v, %v", a, err)
	}
}

// reportMask hides what changes from run to run in a check report.
func reportMask(s string) string {
	for _, m := range []struct{ re, with string }{
		{`("version": )"[^"]*"`, `$1"<version>"`},
		{`("clusterInformationRevision": )"[0-9]+"`, `$1"<rev>"`},
		{`("Revision": )"[0-9]+"`, `$1"<rev>"`},
	} {
		s = regexp.MustCompile(m.re).ReplaceAllString(s, m.with)
	}
	return s
}

func TestIPAMConfigure(t *testing.T) {
	c, alloc := newIPAMCluster(t)
	tests := []struct {
		args []string
		out  string
		want ipam.Config
	}{
		{[]string{"--strictaffinity=true"}, "Successfully set StrictAffinity to: true\n",
			ipam.Config{StrictAffinity: true, AutoAllocateBlocks: true}},
		{[]string{"--max-blocks-per-host=5"}, "Successfully set MaxBlocksPerHost to: 5\n",
			ipam.Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 5}},
		{[]string{"--strictaffinity=false", "--autoallocateblocks=false"}, "Successfully set StrictAffinity to: false\nSuccessfully set AutoAllocateBlocks to: false\n",
			ipam.Config{MaxBlocksPerHost: 5}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := c.mustRun(t, "", append([]string{"ipam", "configure"}, tc.args...)...)
			if out != tc.out {
				t.Errorf("printed %q, want %q", out, tc.out)
			}
			got, err := alloc.GetConfig(context.Background())
			if err != nil || got != tc.want {
				t.Errorf("stored configuration %+v (%v), want %+v", got, err, tc.want)
			}
		})
	}
	golden(t, "ipam-show-configuration-set.txt", c.mustRun(t, "", "ipam", "show", "--show-configuration"))
}
