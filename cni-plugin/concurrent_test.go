package cniplugin

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"testing"
)

// TestConcurrentAddsOnThreeNodes runs 100 ADDs at once spread over three
// nodes against one etcd: every pod gets a distinct address from a block
// affine to its own node, and 100 concurrent DELs free them all.
func TestConcurrentAddsOnThreeNodes(t *testing.T) {
	const pods = 100
	c := newCluster(t)
	c.addPool("pool-a", "10.70.0.0/16", 26)
	nodes := []*node{c.newNode("node1"), c.newNode("node2"), c.newNode("node3")}
	// 200 plugin processes at once on a small machine: each datastore call
	// may wait its turn for a core far longer than the harness's 5 s, and
	// this test is about distinct addresses, not about timeouts.
	confs := map[*node]*libcni.NetworkConfigList{}
	for _, n := range nodes {
		confs[n] = confWith(t, n.calicoConf("1.0.0", nil), "datastore_timeout", "60s")
	}
	type job struct {
		n    *node
		p    *pod
		addr netip.Addr
		err  error
	}
	jobs := make([]*job, pods)
	for i := range jobs {
		n := nodes[i%len(nodes)]
		jobs[i] = &job{n: n, p: n.newPod("load", fmt.Sprintf("pod-%03d", i))}
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			r, err := j.n.add(confs[j.n], j.p.runtimeConf(true))
			if err != nil {
				j.err = err
				return
			}
			_, addrs := resultAddrs(t, r)
			j.addr = addrs[0].Addr()
		})
	}
	wg.Wait()

	owner := map[netip.Addr]string{}
	for _, j := range jobs {
		if j.err != nil {
			t.Errorf("ADD %s on %s: %v", j.p.name, j.n.name, j.err)
			continue
		}
		if prev, dup := owner[j.addr]; dup {
			t.Errorf("address %s given to both %s and %s", j.addr, prev, j.p.name)
		}
		owner[j.addr] = j.p.name
	}
	affs, err := c.alloc.ListAffinities(context.Background())
	if err != nil {
		t.Fatalf("listing affinities: %v", err)
	}
	for _, j := range jobs {
		if j.err != nil {
			continue
		}
		var host string
		for _, a := range affs {
			if a.CIDR.Contains(j.addr) {
				host = a.Host
			}
		}
		if host != j.n.name {
			t.Errorf("%s on %s got %s from a block affine to %q", j.p.name, j.n.name, j.addr, host)
		}
	}
	if got := c.allocated(t); len(got) != len(owner) {
		t.Errorf("datastore holds %d allocations, the pods got %d addresses", len(got), len(owner))
	}

	for _, j := range jobs {
		wg.Go(func() {
			if err := j.n.del(confs[j.n], j.p.runtimeConf(true)); err != nil {
				t.Errorf("DEL %s: %v", j.p.name, err)
			}
		})
	}
	wg.Wait()
	if got := c.allocated(t); len(got) != 0 {
		t.Errorf("%d addresses still allocated after every DEL", len(got))
	}
}
