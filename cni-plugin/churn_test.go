package cniplugin

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestChurnLeavesNoLeak runs rounds of pod churn on one node — ADDs, DELs,
// sandboxes replaced with late DELs of the old one, ADDs that fail and roll
// back — then asks `calicoctl ipam check` for its report: every address
// still allocated must belong to a live WorkloadEndpoint.
func TestChurnLeavesNoLeak(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-a", "10.79.0.0/16", 26)
	n := c.newNode("node1")
	node := &v3.Node{TypeMeta: v3.TypeMeta{Kind: v3.KindNode, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: n.name}}
	if _, err := c.store.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	list := n.calicoConf("1.0.0", nil)
	badMTU := confWith(t, list, "mtu", 70000)
	rng := rand.New(rand.NewPCG(1, 2))

	live := map[string]*pod{} // pod name → current sandbox
	var stale []*pod          // replaced sandboxes awaiting their late DEL
	for round := range 4 {
		for i := range 6 {
			name := "web-" + string(rune('a'+round)) + string(rune('a'+i))
			p := n.newPod("churn", name)
			if _, err := n.add(list, p.runtimeConf(true)); err != nil {
				t.Fatalf("ADD %s: %v", name, err)
			}
			live[name] = p
		}
		// A failing ADD rolls back completely.
		failing := n.newPod("churn", "broken")
		if _, err := n.add(badMTU, failing.runtimeConf(true)); err == nil {
			t.Fatal("ADD with MTU 70000 succeeded")
		}
		names := make([]string, 0, len(live))
		for name := range live {
			names = append(names, name)
		}
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		for _, name := range names[:3] { // deleted pods
			if err := n.del(list, live[name].runtimeConf(true)); err != nil {
				t.Fatalf("DEL %s: %v", name, err)
			}
			delete(live, name)
		}
		for _, name := range names[3:5] { // sandboxes replaced
			fresh := n.newPod("churn", name)
			if _, err := n.add(list, fresh.runtimeConf(true)); err != nil {
				t.Fatalf("ADD replacement of %s: %v", name, err)
			}
			stale = append(stale, live[name])
			live[name] = fresh
		}
	}
	for _, old := range stale {
		if err := n.del(list, old.runtimeConf(true)); err != nil {
			t.Fatalf("late DEL of a replaced sandbox: %v", err)
		}
	}

	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(filepath.Join(binDir, "calicoctl"), "ipam", "check", "-o", report)
	cmd.Env = append(os.Environ(), "ETCD_ENDPOINTS="+c.endpoints[0])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("calicoctl ipam check: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Allocations int               `json:"allocations"`
		WorkloadIPs int               `json:"workloadIPs"`
		Leaked      []json.RawMessage `json:"leakedIPs"`
		Problems    int               `json:"problems"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("report %s: %v", raw, err)
	}
	if got.Problems != 0 || len(got.Leaked) != 0 {
		t.Fatalf("ipam check after churn found problems:\n%s", raw)
	}
	if got.Allocations != len(live) || got.WorkloadIPs != len(live) {
		t.Fatalf("ipam check counts %d allocations and %d workload IPs, want %d live pods:\n%s", got.Allocations, got.WorkloadIPs, len(live), raw)
	}
	if alloc := c.allocated(t); len(alloc) != len(live) {
		t.Fatalf("%d addresses allocated for %d live pods: %v", len(alloc), len(live), alloc)
	}
}
