package cniplugin

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// TestAddRollsBackOnFailure injects a failure at each step after IPAM and
// checks that the failed ADD leaves nothing behind: no veth on either side,
// no endpoint, no allocation.
func TestAddRollsBackOnFailure(t *testing.T) {
	cases := []struct {
		name string
		// hostLocal uses the reference host-local IPAM (through a wrapper
		// that, once addresses are assigned and before it answers, cuts
		// the node from etcd: every later connection is refused).
		hostLocal bool
		mtu       int
		prepare   func(t *testing.T, n *node, p *pod)
		wantCode  uint
	}{
		{name: "etcd gone after IPAM", hostLocal: true, wantCode: types.ErrTryAgainLater},
		{name: "host veth name taken by a bridge", prepare: func(t *testing.T, n *node, p *pod) {
			if err := n.inNode(func() error {
				return netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: hostVeth(p, true)}})
			}); err != nil {
				t.Fatalf("creating bridge %s: %v", hostVeth(p, true), err)
			}
		}, wantCode: types.ErrInternal},
		{name: "workload interface name taken", prepare: func(t *testing.T, n *node, p *pod) {
			if err := p.ns.Do(func(ns.NetNS) error {
				return netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}})
			}); err != nil {
				t.Fatalf("creating eth0 in the pod: %v", err)
			}
		}, wantCode: types.ErrInternal},
		{name: "mtu the kernel refuses", mtu: 70000, wantCode: types.ErrInternal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.addPool("pool-a", "10.68.0.0/16", 26)
			n := c.newNode("node1")
			p := n.newPod("default", "victim")
			var ipamConf map[string]any
			dataDir := filepath.Join(c.dir, "host-local")
			if tc.hostLocal {
				ipamConf = cuttingIPAM(t, c, n, dataDir)
			}
			list := n.calicoConf("1.0.0", ipamConf)
			if tc.mtu != 0 {
				list = confWith(t, list, "mtu", tc.mtu)
			}
			if tc.prepare != nil {
				tc.prepare(t, n, p)
			}

			_, err := n.add(list, p.runtimeConf(true))
			var cniErr *types.Error
			if !errors.As(err, &cniErr) {
				t.Fatalf("ADD: got %v, want a CNI error", err)
			}
			if cniErr.Code != tc.wantCode {
				t.Errorf("ADD error code %d (%s), want %d", cniErr.Code, cniErr.Msg, tc.wantCode)
			}
			t.Logf("ADD failed as expected: code %d: %s", cniErr.Code, cniErr.Msg)
			n.cut.restore(t)

			if hs := n.hostState(t, hostVeth(p, true)); hs.exists && hs.kind == "veth" {
				t.Errorf("failed ADD left veth %s on the node", hostVeth(p, true))
			}
			if ps := p.state(t); ps.exists && tc.name != "workload interface name taken" {
				t.Errorf("failed ADD left eth0 in the pod: %+v", ps)
			}
			if ep := c.endpoint(t, "default", wepName(n, p, true)); ep != nil {
				t.Errorf("failed ADD left workloadendpoint %s", ep.Name)
			}
			if got := c.allocated(t); len(got) != 0 {
				t.Errorf("failed ADD left calico-ipam allocations %v", got)
			}
			if tc.hostLocal {
				if left := hostLocalAllocations(t, filepath.Join(dataDir, "k8s-pod-network")); len(left) != 0 {
					t.Errorf("failed ADD left host-local allocations %v", left)
				}
			}
			if tc.name == "host veth name taken by a bridge" {
				if hs := n.hostState(t, hostVeth(p, true)); !hs.exists || hs.kind != "bridge" {
					t.Errorf("the plugin removed a bridge it did not create: %+v", hs)
				}
			}
		})
	}
}

// cuttingIPAM installs an IPAM plugin that runs the reference host-local
// and, after an ADD that assigned addresses and before it answers, cuts
// the node from etcd (the test's watcher cuts, then lets the plugin go
// on), so every datastore request after IPAM finds etcd gone.
func cuttingIPAM(t *testing.T, c *cluster, n *node, dataDir string) map[string]any {
	cutFile := filepath.Join(c.dir, "cut")
	script := fmt.Sprintf("#!/bin/sh\nout=$(%s/host-local); rc=$?\n"+
		"if [ \"$CNI_COMMAND\" = ADD ] && [ $rc -eq 0 ]; then\n"+
		"  : > %[2]s; i=0; while [ -e %[2]s ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done\nfi\n"+
		"printf '%%s\\n' \"$out\"\nexit $rc\n", refPluginDir, cutFile)
	if err := os.WriteFile(filepath.Join(c.dir, "cutting-ipam"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	watchCut(t, cutFile, n.cut)
	return map[string]any{"type": "cutting-ipam", "dataDir": dataDir,
		"ranges": [][]map[string]string{{{"subnet": "10.99.0.0/24"}}}}
}

// watchCut cuts the node from etcd as soon as file appears, then removes
// the file.
func watchCut(t *testing.T, file string, p *proxy) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			if _, err := os.Stat(file); err == nil {
				p.cut()
				os.Remove(file)
			}
		}
	}()
}

// TestAddWithLostEndpointAnswer: etcd stores the WorkloadEndpoint but its
// answer is lost, and etcd is gone for the rollback. The failed ADD must
// not free the address the stored endpoint claims: it keeps it (and the
// endpoint may stay) until the DEL that follows, which, with etcd back,
// removes both.
func TestAddWithLostEndpointAnswer(t *testing.T) {
	c := newCluster(t)
	n := c.newNode("node1")
	p := n.newPod("default", "victim")
	dataDir := filepath.Join(c.dir, "host-local")
	list := n.calicoConf("1.0.0", map[string]any{"type": "host-local", "dataDir": dataDir,
		"ranges": [][]map[string]string{{{"subnet": "10.98.0.0/24"}}}})
	path := datastore.ResourcePrefix + "workloadendpoints/default/" + wepName(n, p, true)
	n.cut.dropAnswerTo([]byte(base64.StdEncoding.EncodeToString([]byte(path))))

	_, err := n.add(list, p.runtimeConf(true))
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != types.ErrTryAgainLater {
		t.Fatalf("ADD whose endpoint answer was lost: %v, want a try-again-later error", err)
	}
	n.cut.restore(t)
	ep := c.endpoint(t, "default", wepName(n, p, true))
	if ep == nil {
		t.Fatal("the endpoint write did not reach etcd: the test lost the wrong answer")
	}
	held := hostLocalAllocations(t, filepath.Join(dataDir, "k8s-pod-network"))
	for _, ipn := range ep.Spec.IPNetworks {
		ip := strings.TrimSuffix(ipn, "/32")
		if !slices.Contains(held, ip) {
			t.Errorf("stored endpoint claims %s, which the failed ADD released (host-local holds %v): a later pod may get it", ip, held)
		}
	}
	if hs := n.hostState(t, hostVeth(p, true)); hs.exists {
		t.Errorf("failed ADD left veth %s on the node", hostVeth(p, true))
	}

	if err := n.del(list, p.runtimeConf(true)); err != nil {
		t.Fatalf("DEL after the failed ADD: %v", err)
	}
	if ep := c.endpoint(t, "default", wepName(n, p, true)); ep != nil {
		t.Errorf("DEL left workloadendpoint %s", ep.Name)
	}
	if left := hostLocalAllocations(t, filepath.Join(dataDir, "k8s-pod-network")); len(left) != 0 {
		t.Errorf("DEL left host-local allocations %v", left)
	}
}

// hostLocalAllocations lists the addresses host-local holds in dir.
func hostLocalAllocations(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("reading %s: %v", dir, err)
	}
	var out []string
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}
