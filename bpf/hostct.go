package bpf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// flowKey is a flow as both conntracks can name it: protocol, then the
// two sides in CTKey's order (the lower address and port first).
type flowKey struct {
	proto  uint8
	a, b   [16]byte
	pa, pb uint16
}

func flowOf(proto uint8, src, dst net.IP, sport, dport uint16) (flowKey, bool) {
	s, d := src.To16(), dst.To16()
	if s == nil || d == nil {
		return flowKey{}, false
	}
	k := flowKey{proto: proto}
	copy(k.a[:], s)
	copy(k.b[:], d)
	k.pa, k.pb = sport, dport
	if c := compare16(k.a, k.b); c > 0 || c == 0 && k.pa > k.pb {
		k.a, k.b, k.pa, k.pb = k.b, k.a, k.pb, k.pa
	}
	return k, true
}

func compare16(x, y [16]byte) int {
	for i := range x {
		if x[i] != y[i] {
			if x[i] < y[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// ForgetBypassedFlows deletes the host conntrack entries of the TCP and
// UDP flows that ct (a pal_ct map) holds and that the host tracks
// untranslated: the forward program may have sent their packets on past
// netfilter (bpfHostConntrackBypass), so the host's entries hold the
// sequence windows of their handshakes, and a packet of theirs that
// netfilter sees from now on (the bypass turned off, the iptables
// dataplane taking over) would be INVALID, which a chain that drops
// INVALID packets (the iptables dataplane's, kube-proxy's) would drop.
// Without an entry, the next packet is picked up mid-stream as an
// established flow. Translated flows (NAT) were never bypassed and keep
// their entries. It returns how many entries went.
func ForgetBypassedFlows(ns NetNS, ct *ebpf.Map) (int, error) {
	if ns == nil {
		ns = currentNS{}
	}
	flows := map[flowKey]bool{}
	var k CTKey
	var v CTValue
	it := ct.Iterate()
	for it.Next(&k, &v) {
		if k.Proto == unix.IPPROTO_TCP || k.Proto == unix.IPPROTO_UDP {
			flows[flowKey{proto: k.Proto, a: k.A, b: k.B, pa: k.Pa, pb: k.Pb}] = true
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("bpf: reading %s: %w", MapCT, err)
	}
	if len(flows) == 0 {
		return 0, nil
	}
	f := bypassedFlows(flows)
	n := 0
	err := ns.Do(func() error {
		var errs []error
		for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
			// A dump the table's changes interrupt is partial: what it
			// missed is deleted by the next one.
			for try := 0; ; try++ {
				m, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam, f)
				n += int(m)
				if errors.Is(err, netlink.ErrDumpInterrupted) && try < 10 {
					continue
				}
				if err != nil {
					errs = append(errs, err)
				}
				break
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return n, fmt.Errorf("bpf: deleting the host's conntrack entries of bypassed flows: %w", err)
	}
	return n, nil
}

// bypassedFlows matches the host's untranslated entries of the flows.
type bypassedFlows map[flowKey]bool

func (b bypassedFlows) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	fw, rv := f.Forward, f.Reverse
	if !fw.SrcIP.Equal(rv.DstIP) || !fw.DstIP.Equal(rv.SrcIP) || fw.SrcPort != rv.DstPort || fw.DstPort != rv.SrcPort {
		return false // translated
	}
	k, ok := flowOf(fw.Protocol, fw.SrcIP, fw.DstIP, fw.SrcPort, fw.DstPort)
	return ok && b[k]
}

// forgetInDir forgets the bypassed flows of every maps directory of a
// namespace's directory (what RemoveDir removes).
func forgetInDir(dir string, ns NetNS) error {
	paths, _ := filepath.Glob(filepath.Join(dir, "maps-*", MapCT))
	var errs []error
	for _, p := range paths {
		m, err := ebpf.LoadPinnedMap(p, nil)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("bpf: opening %s: %w", p, err))
			}
			continue
		}
		_, err = ForgetBypassedFlows(ns, m)
		m.Close()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
