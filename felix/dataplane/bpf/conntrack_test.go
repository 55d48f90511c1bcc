package bpf

import (
	"github.com/cilium/ebpf"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestCollectConntrack: expired entries (by protocol and state) and those
// of interfaces gone are deleted, with the counters of those interfaces;
// live ones stay.
func TestCollectConntrack(t *testing.T) {
	objs, timeouts := openObjects(t, "ct")
	now := monotonic()
	ago := func(d time.Duration) uint64 { return now - uint64(d) }
	entries := []struct {
		name  string
		key   palbpf.CTKey
		val   palbpf.CTValue
		stays bool
	}{
		{"udp fresh", palbpf.CTKey{Ifindex: 5, Proto: 17, Pa: 1}, palbpf.CTValue{LastSeen: ago(10 * time.Second)}, true},
		{"udp idle", palbpf.CTKey{Ifindex: 5, Proto: 17, Pa: 2}, palbpf.CTValue{LastSeen: ago(2 * time.Minute)}, false},
		{"tcp established", palbpf.CTKey{Ifindex: 5, Proto: 6, Pa: 3}, palbpf.CTValue{LastSeen: ago(10 * time.Minute), Flags: ctReply}, true},
		{"tcp syn idle", palbpf.CTKey{Ifindex: 5, Proto: 6, Pa: 4}, palbpf.CTValue{LastSeen: ago(time.Minute)}, false},
		{"tcp reset", palbpf.CTKey{Ifindex: 5, Proto: 6, Pa: 5}, palbpf.CTValue{LastSeen: ago(time.Minute), Flags: ctReply | ctRST}, false},
		{"icmp idle", palbpf.CTKey{Ifindex: 5, Proto: 1, Pa: 6}, palbpf.CTValue{LastSeen: ago(time.Minute)}, false},
		{"interface gone", palbpf.CTKey{Ifindex: 9, Proto: 17, Pa: 7}, palbpf.CTValue{LastSeen: now}, false},
	}
	ct := objs.Maps[palbpf.MapCT]
	for _, e := range entries {
		if err := ct.Put(e.key, e.val); err != nil {
			t.Fatal(err)
		}
	}
	counters := objs.Maps[palbpf.MapCounters]
	per := make([]palbpf.CounterValue, len(mustCPUs(t)))
	for _, idx := range []uint32{5, 9} {
		if err := counters.Put(palbpf.CounterKey{Ifindex: idx, Stage: palbpf.StageGeneral}, per); err != nil {
			t.Fatal(err)
		}
	}
	n, err := collectConntrack(objs, timeouts, map[uint32]bool{9: true}, &sweepBufs{})
	if err != nil {
		t.Fatal(err)
	}
	var v palbpf.CTValue
	deleted := 0
	for _, e := range entries {
		err := ct.Lookup(e.key, &v)
		if (err == nil) != e.stays {
			t.Errorf("%s: present %v, want %v", e.name, err == nil, e.stays)
		}
		if !e.stays {
			deleted++
		}
	}
	if n != deleted {
		t.Errorf("collected %d entries, want %d", n, deleted)
	}
	if err := counters.Lookup(palbpf.CounterKey{Ifindex: 9, Stage: palbpf.StageGeneral}, &per); err == nil {
		t.Error("the counters of the interface gone stay")
	}
	if err := counters.Lookup(palbpf.CounterKey{Ifindex: 5, Stage: palbpf.StageGeneral}, &per); err != nil {
		t.Errorf("the counters of a live interface went: %v", err)
	}
}

// TestCollectConntrackBatches: a sweep reads and deletes in batches; with
// entries over several batches every expired one goes and every live one
// stays, counters of an interface gone too.
func TestCollectConntrackBatches(t *testing.T) {
	objs, timeouts := openObjects(t, "ctb")
	now := monotonic()
	const n = 3*batchSize + 17
	var keys []palbpf.CTKey
	var vals []palbpf.CTValue
	for i := range n {
		k := palbpf.CTKey{Ifindex: 5, Proto: 17, Pa: uint16(i), Pb: uint16(i >> 16)}
		v := palbpf.CTValue{LastSeen: now}
		if i%3 == 0 {
			v.LastSeen = now - uint64(2*time.Minute) // expired
		}
		if i%7 == 0 {
			k.Ifindex = 9 // gone
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	ct := objs.Maps[palbpf.MapCT]
	if _, err := ct.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatal(err)
	}
	counters := objs.Maps[palbpf.MapCounters]
	per := make([]palbpf.CounterValue, len(mustCPUs(t)))
	for i := range 2*batchSize + 5 {
		k := palbpf.CounterKey{Ifindex: uint32(5 + 4*(i%2)), Stage: palbpf.StageGeneral, Rule: uint64(i)}
		if err := counters.Put(k, per); err != nil {
			t.Fatal(err)
		}
	}
	got, err := collectConntrack(objs, timeouts, map[uint32]bool{9: true}, &sweepBufs{})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	var v palbpf.CTValue
	for i, k := range keys {
		gone := i%3 == 0 || i%7 == 0
		if gone {
			want++
		}
		if err := ct.Lookup(k, &v); (err == nil) == gone {
			t.Fatalf("entry %d: present %v, want %v", i, err == nil, !gone)
		}
	}
	if got != want {
		t.Errorf("collected %d entries, want %d", got, want)
	}
	left := map[uint32]int{}
	var ck palbpf.CounterKey
	it := counters.Iterate()
	for it.Next(&ck, &per) {
		left[ck.Ifindex]++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if left[9] != 0 || left[5] != batchSize+3 {
		t.Errorf("counters left by interface %v, want none of 9 and %d of 5", left, batchSize+3)
	}
}

// openObjects opens the eBPF objects in a namespace of the test's own,
// all removed when the test ends, and returns them with the default
// conntrack timeouts.
func openObjects(t *testing.T, name string) (*palbpf.Objects, palbpf.Timeouts) {
	t.Helper()
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), name)
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	objs, err := palbpf.Open(palbpf.Options{NS: run})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		objs.Close()
		if err := palbpf.RemoveDir(objs.Dir, nil); err != nil {
			t.Error(err)
		}
	})
	timeouts, err := palbpf.DefaultTimeouts()
	if err != nil {
		t.Fatal(err)
	}
	return objs, timeouts
}

func mustCPUs(t *testing.T) []struct{} {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	return make([]struct{}, n)
}

// TestConfigTimeouts: bpfConntrackTimeouts overrides the defaults field
// by field; Auto and bad values keep them.
func TestConfigTimeouts(t *testing.T) {
	def := palbpf.Timeouts{TCPSynSent: 20 * time.Second, TCPEstablished: time.Hour, UDP: time.Minute, ICMP: 5 * time.Second}
	s := func(v string) *string { return &v }
	cfg := calc.MergeConfig(&v3.FelixConfigurationSpec{BPFConntrackTimeouts: &v3.BPFConntrackTimeouts{
		TCPEstablished: s("10m"), UDPTimeout: s("Auto"), ICMPTimeout: s("soon"), TCPSynSent: s("3s"),
	}}, nil)
	got := configTimeouts(cfg, def, log.NewEntry(log.StandardLogger()))
	want := palbpf.Timeouts{TCPSynSent: 3 * time.Second, TCPEstablished: 10 * time.Minute, UDP: time.Minute, ICMP: 5 * time.Second}
	if got != want {
		t.Errorf("timeouts %+v, want %+v", got, want)
	}
}

// TestCollectNAT: flows' translations expire as conntrack's do, by
// protocol and TCP state (both FINs, a reset), and only those.
func TestCollectNAT(t *testing.T) {
	objs, timeouts := openObjects(t, "nat")
	now := monotonic()
	ago := func(d time.Duration) uint64 { return now - uint64(d) }
	entries := []struct {
		name  string
		key   palbpf.NATKey
		val   palbpf.NATValue
		stays bool
	}{
		{"udp fresh", palbpf.NATKey{Proto: 17, Sport: 1}, palbpf.NATValue{LastSeen: ago(10 * time.Second), Kind: palbpf.NATForward}, true},
		{"udp idle", palbpf.NATKey{Proto: 17, Sport: 2}, palbpf.NATValue{LastSeen: ago(2 * time.Minute), Kind: palbpf.NATReverse}, false},
		{"tcp established", palbpf.NATKey{Proto: 6, Sport: 3}, palbpf.NATValue{LastSeen: ago(10 * time.Minute), Kind: palbpf.NATForward}, true},
		{"tcp one FIN", palbpf.NATKey{Proto: 6, Sport: 4}, palbpf.NATValue{LastSeen: ago(time.Minute), Flags: palbpf.NATFlagFinC}, true},
		{"tcp both FINs", palbpf.NATKey{Proto: 6, Sport: 5}, palbpf.NATValue{LastSeen: ago(time.Minute), Flags: palbpf.NATFlagFinC | palbpf.NATFlagFinB}, false},
		{"tcp reset", palbpf.NATKey{Proto: 6, Sport: 6}, palbpf.NATValue{LastSeen: ago(20 * time.Second), Flags: palbpf.NATFlagRST}, false},
		{"tcp idle", palbpf.NATKey{Proto: 6, Sport: 7}, palbpf.NATValue{LastSeen: ago(2 * time.Hour), Kind: palbpf.NATTunnel}, false},
	}
	m := objs.Maps[palbpf.MapNAT]
	for _, e := range entries {
		if err := m.Put(e.key, e.val); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := collectConntrack(objs, timeouts, nil, &sweepBufs{}); err != nil {
		t.Fatal(err)
	}
	var v palbpf.NATValue
	for _, e := range entries {
		if err := m.Lookup(e.key, &v); (err == nil) != e.stays {
			t.Errorf("%s: present %v, want %v", e.name, err == nil, e.stays)
		}
	}
}
