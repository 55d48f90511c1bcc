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

// monotonic is the clock of bpf_ktime_get_ns.
func monotonic() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// collectConntrack deletes the conntrack and fragment entries that expired
// and, with the counters, those of interfaces gone. It returns how many
// conntrack entries went.
func collectConntrack(objs *palbpf.Objects, t palbpf.Timeouts, gone map[uint32]bool) (int, error) {
	now := monotonic()
	var errs []error
	ct := objs.Maps[palbpf.MapCT]
	var k palbpf.CTKey
	var v palbpf.CTValue
	var stale []palbpf.CTKey
	it := ct.Iterate()
	for it.Next(&k, &v) {
		if gone[k.Ifindex] || now > v.LastSeen && time.Duration(now-v.LastSeen) > ctTimeout(t, k.Proto, v.Flags) {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		errs = append(errs, fmt.Errorf("reading %s: %w", palbpf.MapCT, err))
	}
	deleted := 0
	for _, k := range stale {
		if err := ct.Delete(k); err == nil {
			deleted++
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	frag := objs.Maps[palbpf.MapFrag]
	var fk palbpf.FragKey
	var fv uint64
	var fstale []palbpf.FragKey
	it = frag.Iterate()
	for it.Next(&fk, &fv) {
		if gone[fk.Ifindex] || now > fv && time.Duration(now-fv) > t.Fragment {
			fstale = append(fstale, fk)
		}
	}
	for _, k := range fstale {
		_ = frag.Delete(k)
	}
	if len(gone) > 0 {
		counters := objs.Maps[palbpf.MapCounters]
		var ck palbpf.CounterKey
		var cv []palbpf.CounterValue
		var cstale []palbpf.CounterKey
		it = counters.Iterate()
		for it.Next(&ck, &cv) {
			if gone[ck.Ifindex] {
				cstale = append(cstale, ck)
			}
		}
		for _, k := range cstale {
			_ = counters.Delete(k)
		}
	}
	return deleted, errors.Join(errs...)
}
