package bpf

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	palbpf "github.com/palisade-net/palisade/bpf"
)

// Conntrack flags (PAL_CT_*).
const (
	ctOrigA = 0x01
	ctReply = 0x02
	ctFinA  = 0x04
	ctFinB  = 0x08
	ctRST   = 0x10
)

// ctTimeout is how long an entry lives after its last packet, as the
// programs judge it (ct_timeout in c/palisade.c).
func ctTimeout(t palbpf.Timeouts, proto uint8, flags uint32) time.Duration {
	switch proto {
	case 6:
		switch {
		case flags&ctRST != 0:
			return t.TCPResetSeen
		case flags&(ctFinA|ctFinB) == ctFinA|ctFinB:
			return t.TCPFinsSeen
		case flags&ctReply != 0:
			return t.TCPEstablished
		}
		return t.TCPSynSent
	case 17, 136:
		return t.UDP
	case 1, 58:
		return t.ICMP
	}
	return t.Other
}

// natTimeout is how long a flow's translation lives after its last
// packet, as the programs judge it (nat_timeout in c/nat.h).
func natTimeout(t palbpf.Timeouts, proto uint8, flags uint8) time.Duration {
	switch proto {
	case 6:
		switch {
		case flags&palbpf.NATFlagRST != 0:
			return t.TCPResetSeen
		case flags&(palbpf.NATFlagFinC|palbpf.NATFlagFinB) == palbpf.NATFlagFinC|palbpf.NATFlagFinB:
			return t.TCPFinsSeen
		}
		return t.TCPEstablished
	case 17:
		return t.UDP
	}
	return t.Other
}

// monotonic is the clock of bpf_ktime_get_ns.
func monotonic() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// batchSize is how many entries one batch system call reads or deletes:
// walking a map key by key costs two calls per entry, and a sweep of the
// conntrack map on a busy node took tens of milliseconds of the main loop.
const batchSize = 4096

// batchBuf holds a walk's buffers between sweeps: hundreds of KB each,
// made anew on every sweep (one per pod deleted) they were most of what
// felix allocated, and its garbage collections took the CPU from new
// pods' first packets.
type batchBuf[K, V any] struct {
	keys []K
	vals []V
}

// walk reads a hash map in batches and calls fn with each batch's keys and
// values (values holds perKey values per key: the CPUs of a per-CPU map).
// Entries added or removed meanwhile may be missed; the next walk sees them.
func (b *batchBuf[K, V]) walk(m *ebpf.Map, perKey int, fn func(keys []K, vals []V)) error {
	if len(b.keys) < batchSize {
		b.keys = make([]K, batchSize)
	}
	if len(b.vals) != batchSize*perKey {
		b.vals = make([]V, batchSize*perKey)
	}
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, b.keys, b.vals, nil)
		if n > 0 {
			fn(b.keys[:n], b.vals[:n*perKey])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// reuse keeps a list of stale keys for the next sweep, unless a large
// sweep grew it (not to hold megabytes between sweeps).
func reuse[K any](keys []K) []K {
	if cap(keys) > 1<<16 {
		return nil
	}
	return keys[:0]
}

// sweepBufs are the sweeps' buffers, by map.
type sweepBufs struct {
	ct       batchBuf[palbpf.CTKey, palbpf.CTValue]
	frag     batchBuf[palbpf.FragKey, uint64]
	nat      batchBuf[palbpf.NATKey, palbpf.NATValue]
	nstale   []palbpf.NATKey
	counters batchBuf[palbpf.CounterKey, palbpf.CounterValue]
	stale    []palbpf.CTKey
	fstale   []palbpf.FragKey
	cstale   []palbpf.CounterKey
}

// deleteAll deletes keys, in batches; keys already gone are not an error.
// It returns how many it deleted.
func deleteAll[K any](m *ebpf.Map, keys []K) (int, error) {
	deleted := 0
	for len(keys) > 0 {
		n, err := m.BatchDelete(keys[:min(len(keys), batchSize)], nil)
		deleted += n
		keys = keys[n:]
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			keys = keys[1:] // the batch stopped at a key gone meanwhile
		case err != nil:
			return deleted, err
		}
	}
	return deleted, nil
}

// sweepStale deletes the entries of a map that expired says are stale
// (the walk's buffer b, the stale keys' kept in *stale); it returns how
// many it deleted.
func sweepStale[K, V any](m *ebpf.Map, name string, b *batchBuf[K, V], stale *[]K, expired func(k *K, v *V) bool) (int, error) {
	keys := (*stale)[:0]
	var errs []error
	if err := b.walk(m, 1, func(ks []K, vs []V) {
		for i := range ks {
			if expired(&ks[i], &vs[i]) {
				keys = append(keys, ks[i])
			}
		}
	}); err != nil {
		errs = append(errs, fmt.Errorf("reading %s: %w", name, err))
	}
	*stale = reuse(keys)
	n, err := deleteAll(m, keys)
	if err != nil {
		errs = append(errs, fmt.Errorf("deleting from %s: %w", name, err))
	}
	return n, errors.Join(errs...)
}

// collectConntrack deletes the conntrack, flow translation and fragment
// entries that expired and, with the counters, those of interfaces gone.
// It returns how many conntrack entries went.
func collectConntrack(objs *palbpf.Objects, t palbpf.Timeouts, gone map[uint32]bool, b *sweepBufs) (int, error) {
	now := monotonic()
	expired := func(last uint64, timeout time.Duration) bool {
		return now > last && time.Duration(now-last) > timeout
	}
	deleted, err := sweepStale(objs.Maps[palbpf.MapCT], palbpf.MapCT, &b.ct, &b.stale, func(k *palbpf.CTKey, v *palbpf.CTValue) bool {
		return gone[k.Ifindex] || expired(v.LastSeen, ctTimeout(t, k.Proto, v.Flags))
	})
	errs := []error{err}
	_, err = sweepStale(objs.Maps[palbpf.MapNAT], palbpf.MapNAT, &b.nat, &b.nstale, func(k *palbpf.NATKey, v *palbpf.NATValue) bool {
		return expired(v.LastSeen, natTimeout(t, k.Proto, v.Flags))
	})
	errs = append(errs, err)
	_, err = sweepStale(objs.Maps[palbpf.MapFrag], palbpf.MapFrag, &b.frag, &b.fstale, func(k *palbpf.FragKey, last *uint64) bool {
		return gone[k.Ifindex] || expired(*last, t.Fragment)
	})
	errs = append(errs, err)
	if len(gone) > 0 {
		counters := objs.Maps[palbpf.MapCounters]
		cpus, err := ebpf.PossibleCPU()
		if err != nil {
			return deleted, errors.Join(append(errs, err)...)
		}
		cstale := b.cstale[:0]
		if err := b.counters.walk(counters, cpus, func(keys []palbpf.CounterKey, _ []palbpf.CounterValue) {
			for _, k := range keys {
				if gone[k.Ifindex] {
					cstale = append(cstale, k)
				}
			}
		}); err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", palbpf.MapCounters, err))
		}
		b.cstale = reuse(cstale)
		if _, err := deleteAll(counters, cstale); err != nil {
			errs = append(errs, fmt.Errorf("deleting from %s: %w", palbpf.MapCounters, err))
		}
	}
	return deleted, errors.Join(errs...)
}
