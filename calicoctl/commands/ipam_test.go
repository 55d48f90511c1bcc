package commands_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
`

// newIPAMCluster loads ipamResources and makes the allocations:
// 10.10.0.1 (web-1, in use), 10.10.0.2 (web-2, no endpoint: leaked),
// 10.10.0.5 (api-1 on node-b, borrowed from node-a's block) and
// 10.10.0.130 (db-1 on node-gone, whose block is affine to it).
func newIPAMCluster(t *testing.T) (*cluster, *ipam.Allocator) {
	t.Helper()
	c := newCluster(t)
	c.mustRun(t, ipamResources, "apply", "-f", "-")
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

func TestIPAMReleaseThenCheck(t *testing.T) {
	c, alloc := newIPAMCluster(t)
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	c.mustRun(t, "", "ipam", "check", "-o", report)
	rep := readReport(t, report)
	if len(rep.Leaked) != 1 || rep.Leaked[0].IP != "10.10.0.2" || rep.Leaked[0].Handle != "k8s-pod-network.c2" {
		t.Errorf("leaked IPs %+v, want only 10.10.0.2 (handle k8s-pod-network.c2)", rep.Leaked)
	}
	if len(rep.MissingNodeBlocks) != 1 || rep.MissingNodeBlocks[0].CIDR != "10.10.0.128/26" || rep.MissingNodeBlocks[0].Node != "node-gone" {
		t.Errorf("blocks of missing nodes %+v, want 10.10.0.128/26 of node-gone", rep.MissingNodeBlocks)
	}
	if len(rep.MissingNodeIPs) != 1 || rep.MissingNodeIPs[0].IP != "10.10.0.130" {
		t.Errorf("IPs of missing nodes %+v, want 10.10.0.130", rep.MissingNodeIPs)
	}
	if rep.Problems != 3 || rep.Allocations != 4 || rep.Blocks != 2 {
		t.Errorf("report counts %d problems, %d allocations, %d blocks; want 3, 4, 2", rep.Problems, rep.Allocations, rep.Blocks)
	}

	if out := c.mustRun(t, "", "ipam", "release", "--ip=10.10.0.2"); out != "Successfully released IP address 10.10.0.2\n" {
		t.Errorf("release printed %q", out)
	}
	if _, err := alloc.GetAssignmentAttributes(context.Background(), netip.MustParseAddr("10.10.0.2")); err == nil {
		t.Error("10.10.0.2 still assigned after release")
	}
	if _, err := alloc.IPsByHandle(context.Background(), "k8s-pod-network.c2"); err == nil {
		t.Error("handle k8s-pod-network.c2 still stored after its only address was released")
	}
	if out := c.mustRun(t, "", "ipam", "show", "--ip=10.10.0.2"); out != "IP 10.10.0.2 is not currently assigned\n" {
		t.Errorf("show after release printed %q", out)
	}
	c.mustRun(t, "", "ipam", "check", "-o", report)
	if rep := readReport(t, report); len(rep.Leaked) != 0 || rep.Problems != 2 {
		t.Errorf("after releasing the leak: leaked %+v, %d problems; want none leaked, 2 problems", rep.Leaked, rep.Problems)
	}
}

type ipamReport struct {
	Blocks, Allocations, Problems int
	Leaked                        []struct{ IP, Handle string } `json:"leakedIPs"`
	MissingNodeBlocks             []struct{ CIDR, Node string } `json:"blocksOfMissingNodes"`
	MissingNodeIPs                []struct{ IP string }         `json:"ipsOfMissingNodes"`
}

func readReport(t *testing.T, path string) ipamReport {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep ipamReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report %s: %v\n%s", path, err, data)
	}
	return rep
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
