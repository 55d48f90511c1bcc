package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// TestConcurrentAutoAssign runs 100 auto-assigns for three nodes at once,
// each on its own connection, then releases everything concurrently.
func TestConcurrentAutoAssign(t *testing.T) {
	const clients, numNodes = 100, 3
	e := newEnv(t)
	// 16 blocks of 16: each node needs three blocks, so claiming races
	// happen and no node ever has to borrow.
	e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 28 })
	allocs := make([]*Allocator, clients)
	for i := range allocs {
		_, allocs[i] = e.connect()
	}
	node := func(i int) string { return fmt.Sprintf("node-%d", i%numNodes) }

	got := make([]netip.Prefix, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v4, _, err := allocs[i].AutoAssign(ctxT(t), AutoAssignArgs{
				Num4: 1, HandleID: fmt.Sprintf("h-%d", i), Hostname: node(i),
				Attrs: map[string]string{"pod": fmt.Sprintf("pod-%d", i)},
			})
			errs[i] = err
			if err == nil {
				got[i] = v4.IPs[0]
			}
		}()
	}
	close(start)
	wg.Wait()

	seen := map[netip.Addr]int{}
	blocks := e.blocks()
	for i, p := range got {
		if errs[i] != nil {
			t.Fatalf("client %d (%s): %v", i, node(i), errs[i])
		}
		if j, dup := seen[p.Addr()]; dup {
			t.Errorf("address %s handed to clients %d and %d", p.Addr(), j, i)
		}
		seen[p.Addr()] = i
		if b := blocks[p.Masked()]; b.Host != node(i) {
			t.Errorf("client %d on %s got %s from a block affine to %q", i, node(i), p, b.Host)
		}
		al, err := e.alloc.GetAssignmentAttributes(ctxT(t), p.Addr())
		if err != nil || al.HandleID != fmt.Sprintf("h-%d", i) || al.Attrs["pod"] != fmt.Sprintf("pod-%d", i) {
			t.Errorf("client %d: %s recorded as %+v (%v)", i, p, al, err)
		}
	}
	if h := e.handles(); len(h) != clients {
		t.Errorf("%d handles stored, want %d", len(h), clients)
	}
	e.checkInvariants()

	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = allocs[i].ReleaseByHandle(ctxT(t), fmt.Sprintf("h-%d", i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("client %d release: %v", i, err)
		}
	}
	for n := range numNodes {
		if err := e.alloc.ReleaseHostAffinities(ctxT(t), node(n)); err != nil {
			t.Errorf("releasing %s: %v", node(n), err)
		}
	}
	if b, a, h := e.blocks(), e.affinities(), e.handles(); len(b)+len(a)+len(h) != 0 {
		t.Errorf("after releasing everything: blocks %v, affinities %v, handles %v", b, a, h)
	}
}

// TestConcurrentMixedOperations interleaves assigns, specific assigns and
// releases on one small pool from many connections and checks the stored
// state stays consistent.
func TestConcurrentMixedOperations(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.0.0.0/26", func(s *v3.IPPoolSpec) { s.BlockSize = 29 })
	const workers = 12
	var wg sync.WaitGroup
	var held sync.Map // addr → handle
	for w := range workers {
		_, a := e.connect()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxT(t)
			for i := range 15 {
				h := fmt.Sprintf("w%d-%d", w, i)
				switch i % 3 {
				case 0, 1:
					v4, _, err := a.AutoAssign(ctx, AutoAssignArgs{Num4: 2, HandleID: h, Hostname: fmt.Sprintf("n%d", w%4)})
					if v4 != nil {
						for _, p := range v4.IPs {
							if prev, dup := held.LoadOrStore(p.Addr(), h); dup {
								t.Errorf("%s handed to %s and %s", p.Addr(), prev, h)
							}
						}
					}
					if err != nil && !isExhausted(err) {
						t.Errorf("worker %d: %v", w, err)
					}
				case 2:
					prev := fmt.Sprintf("w%d-%d", w, i-2)
					ips, err := a.IPsByHandle(ctx, prev)
					if err != nil {
						continue // nothing was assigned to it
					}
					for _, ip := range ips {
						held.Delete(ip)
					}
					if err := a.ReleaseByHandle(ctx, prev); err != nil {
						t.Errorf("worker %d release %s: %v", w, prev, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	e.checkInvariants()
}

func isExhausted(err error) bool { return errors.Is(err, ErrExhausted) }

// BenchmarkAutoAssignConcurrent50 measures 50 clients, each on its own
// connection, auto-assigning one address each call with its own handle,
// against 50 clients doing the same number of raw etcd compare-and-swap
// transactions. Reported: addrs/s and x/ref (our time / raw CAS time).
// "nodes" is how many distinct nodes the clients allocate for: 50 is one
// node per client (Calico's CNI plugin serialises IPAM per node), 5 puts
// ten clients on each node's blocks.
func BenchmarkAutoAssignConcurrent50(b *testing.B) {
	for _, nodes := range []int{50, 5} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			benchAutoAssign(b, 50, nodes)
		})
	}
}

func benchAutoAssign(b *testing.B, clients, nodes int) {
	// Block claims are logged at info level; keep the output readable.
	level := log.GetLevel()
	log.SetLevel(log.WarnLevel)
	b.Cleanup(func() { log.SetLevel(level) })
	e := newEnv(b)
	e.pool("bench", "10.0.0.0/12", nil)
	stores := make([]*etcdv3.Store, clients)
	allocs := make([]*Allocator, clients)
	for i := range clients {
		stores[i], _ = e.connect()
		kv := &countingKV{KV: stores[i].KV()}
		st := &countingStore{Interface: stores[i]}
		allocs[i] = New(st, kv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Reference: b.N raw CAS transactions by the same 50 connections.
	refStart := time.Now()
	var next atomic.Int64
	runClients(clients, func(i int) {
		c := stores[i].Client()
		key := fmt.Sprintf("/bench/ref/%d", i)
		put, err := c.Put(ctx, key, "0")
		if err != nil {
			b.Error(err)
			return
		}
		rev := put.Header.Revision
		for next.Add(1) <= int64(b.N) {
			resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpPut(key, "x")).Commit()
			if err != nil || !resp.Succeeded {
				b.Errorf("raw CAS on %s: %v (succeeded %t)", key, err, err == nil && resp.Succeeded)
				return
			}
			rev = resp.Header.Revision
		}
	})
	refTime := time.Since(refStart)

	got := make([][]netip.Addr, clients)
	next.Store(0)
	b.ResetTimer()
	start := time.Now()
	runClients(clients, func(i int) {
		for {
			n := next.Add(1)
			if n > int64(b.N) {
				return
			}
			v4, _, err := allocs[i].AutoAssign(ctx, AutoAssignArgs{
				Num4: 1, HandleID: fmt.Sprintf("bench-%d", n), Hostname: fmt.Sprintf("node-%d", i%nodes),
			})
			if err != nil {
				b.Errorf("client %d: %v", i, err)
				return
			}
			got[i] = append(got[i], v4.IPs[0].Addr())
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()

	seen := make(map[netip.Addr]bool, b.N)
	for _, as := range got {
		for _, a := range as {
			if seen[a] {
				b.Fatalf("address %s assigned twice", a)
			}
			seen[a] = true
		}
	}
	if len(seen) != b.N {
		b.Fatalf("%d addresses assigned, want %d", len(seen), b.N)
	}
	var calls int64
	for _, a := range allocs {
		calls += a.kv.(*countingKV).calls.Load() + a.store.(*countingStore).calls.Load()
	}
	b.ReportMetric(float64(calls)/float64(b.N), "calls/addr")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "addrs/s")
	b.ReportMetric(elapsed.Seconds()/refTime.Seconds(), "x/ref")
}

// runClients runs fn for each client index concurrently and waits.
func runClients(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}
