package cniplugin

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/endpointstatus"
)

// TestAddWaitsForProgrammedPolicy: with policy_setup_timeout_seconds, ADD
// returns only once the endpoint's status file (felix's side of the
// contract, written here by the test at a known moment) reports its
// address programmed; with no report it gives up after the timeout and
// the pod is still networked.
func TestAddWaitsForProgrammedPolicy(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-a", "10.83.0.0/16", 26)
	n := c.newNode("node1")
	statusDir := t.TempDir()
	list := confWith(t, n.calicoConf("1.0.0", nil), "policy_setup_timeout_seconds", 2)
	list = confWith(t, list, "endpoint_status_dir", statusDir)

	t.Run("reported", func(t *testing.T) {
		p := n.newPod("wait", "reported")
		const delay = 600 * time.Millisecond
		// Stand in for felix: report the endpoint once its allocation
		// exists, delay after the test started.
		done := make(chan error, 1)
		go func() {
			time.Sleep(delay)
			ips := c.handleIPs(t, handleOf(p))
			st := endpointstatus.Status{Endpoint: "wait/" + wepName(n, p, true), Status: endpointstatus.Up}
			for _, ip := range ips {
				st.Addresses = append(st.Addresses, netip.PrefixFrom(ip, ip.BitLen()).String())
			}
			b, _ := json.Marshal(st)
			done <- os.WriteFile(filepath.Join(statusDir, endpointstatus.FileName("wait", wepName(n, p, true))), b, 0o644)
		}()
		start := time.Now()
		if _, err := n.add(list, p.runtimeConf(true)); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		took := time.Since(start)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if took < delay || took > 2*time.Second {
			t.Errorf("ADD took %v: want it to return soon after the status appeared at %v, before the 2 s timeout", took, delay)
		}
	})

	t.Run("not reported", func(t *testing.T) {
		p := n.newPod("wait", "silent")
		start := time.Now()
		if _, err := n.add(list, p.runtimeConf(true)); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		if took := time.Since(start); took < 2*time.Second {
			t.Errorf("ADD took %v with no status report: want it to wait out the 2 s timeout", took)
		}
		if ep := c.endpoint(t, "wait", wepName(n, p, true)); ep == nil {
			t.Error("ADD that timed out waiting for policy left no endpoint")
		}
	})
}
