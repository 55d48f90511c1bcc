// Package ipsets keeps the kernel's IP sets of one family (cali40… or
// cali60…) equal to what felix's rules need: it takes set contents and deltas
// cheaply, then writes only the difference from the kernel in one
// `ipset restore`, filling a temporary set and swapping it in when a set
// changes a lot. Sets no longer needed are destroyed in a separate step,
// after the rules that used them are gone.
package ipsets

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/metrics"
	"github.com/palisade-net/palisade/felix/rules"
)

// MaxElem is the capacity each set is created with by default (Calico's
// maxIpsetSize default).
const MaxElem = 1048576

// swapThreshold: a change touching more members than this (and more than
// half the set) is written as a new set swapped in.
const swapThreshold = 64

type set struct {
	typ     calc.IPSetType
	members map[string]struct{}
	// max is the kernel set's maxelem (0 in wanted sets).
	max int
}

func (s *set) clone() *set {
	c := &set{typ: s.typ, max: s.max, members: make(map[string]struct{}, len(s.members))}
	for m := range s.members {
		c.members[m] = struct{}{}
	}
	return c
}

// Manager owns the IP sets of one family.
type Manager struct {
	family int
	prefix string // "cali4" or "cali6": every set (and temp set) we own
	run    *nsexec.Runner
	log    *log.Entry

	desired map[string]*set // kernel name → content
	kernel  map[string]*set // what the kernel holds, as last read or written
	dirty   map[string]struct{}
	// resync asks for the kernel to be read back before the next write.
	resync bool
	// nl writes small deltas without starting a process (nil: always
	// ipset restore).
	nl *netlink.Handle
	// metrics counts ipset runs and netlink transactions (nil: none).
	metrics *metrics.Felix
	// maxElem is maxIpsetSize: the maxelem sets are created with; a set
	// of another size is rebuilt (filled under a temporary name, swapped).
	maxElem int
}

// SetMaxSize sets maxIpsetSize (MaxElem when n <= 0); sets of another
// size are rebuilt at the next apply. A set that would hold more fails
// to write, as in Calico.
func (m *Manager) SetMaxSize(n int) {
	if n <= 0 {
		n = MaxElem
	}
	if n == m.maxElem {
		return
	}
	m.maxElem = n
	for name := range m.desired {
		if k := m.kernel[name]; k != nil && k.max != n {
			m.dirty[name] = struct{}{}
		}
	}
}

// SetMetrics makes the manager count its ipset runs and netlink writes
// in m.
func (m *Manager) SetMetrics(fm *metrics.Felix) { m.metrics = fm }

// revision is the set type revision created through netlink: the first
// that has every feature ipset restore would use here (maxelem, CIDR
// entries, SCTP ports).
var revision = map[calc.IPSetType]uint8{calc.IPSetNet: 1, calc.IPSetIPPort: 1}

// netlinkMax is the largest delta written through netlink; bigger ones go
// through one ipset restore.
const netlinkMax = 64

// New makes the manager of family 4 or 6, running ipset through run.
func New(family int, run *nsexec.Runner, logger *log.Entry) *Manager {
	nl, err := run.Netlink()
	if err != nil {
		logger.WithError(err).Warn("No netlink handle for IP set deltas: using ipset restore only")
		nl = nil
	}
	return &Manager{
		nl: nl, family: family, prefix: fmt.Sprintf("cali%d", family), run: run,
		log:     logger.WithField("ipsets", family),
		desired: map[string]*set{}, kernel: map[string]*set{}, dirty: map[string]struct{}{},
		resync: true, maxElem: MaxElem,
	}
}

func (m *Manager) ours(member string) bool { return calc.MemberIsIPv6(member) == (m.family == 6) }

// Name is the kernel name of a set ID in this family.
func (m *Manager) Name(id string) string { return rules.IPSetName(id, m.family) }

// Set replaces the content of a set (members of the other family are
// ignored).
func (m *Manager) Set(id string, typ calc.IPSetType, members []string) {
	s := &set{typ: typ, members: make(map[string]struct{}, len(members))}
	for _, mb := range members {
		if m.ours(mb) {
			s.members[mb] = struct{}{}
		}
	}
	name := m.Name(id)
	m.desired[name] = s
	m.dirty[name] = struct{}{}
}

// Delta adds and removes members of a set already Set.
func (m *Manager) Delta(id string, added, removed []string) {
	name := m.Name(id)
	s := m.desired[name]
	if s == nil {
		m.log.WithField("set", id).Warn("Delta for an unknown IP set ignored")
		return
	}
	for _, mb := range removed {
		if m.ours(mb) {
			delete(s.members, mb)
			m.dirty[name] = struct{}{}
		}
	}
	for _, mb := range added {
		if m.ours(mb) {
			s.members[mb] = struct{}{}
			m.dirty[name] = struct{}{}
		}
	}
}

// Remove says the set is no longer needed; it is destroyed by
// ApplyDeletions.
func (m *Manager) Remove(id string) {
	name := m.Name(id)
	delete(m.desired, name)
	delete(m.dirty, name)
}

// Resync makes the next apply read the kernel back first (the periodic
// refresh, or after an error).
func (m *Manager) Resync() { m.resync = true }

// Len is the number of sets wanted.
func (m *Manager) Len() int { return len(m.desired) }

func (m *Manager) read(ctx context.Context) error {
	out, err := m.run.Run(ctx, "", "ipset", "save")
	m.metrics.IPSet(err)
	if err != nil {
		return fmt.Errorf("reading IP sets: %w", err)
	}
	kernel, err := parseSave(out, m.prefix)
	if err != nil {
		return err
	}
	m.kernel = kernel
	// Every set whose kernel content differs is rewritten.
	for name, want := range m.desired {
		if have := kernel[name]; have == nil || !equal(have, want) || have.max != m.maxElem {
			m.dirty[name] = struct{}{}
		}
	}
	m.resync = false
	return nil
}

// parseSave reads `ipset save` output, keeping sets whose name starts with
// prefix.
func parseSave(out []byte, prefix string) (map[string]*set, error) {
	sets := map[string]*set{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || !strings.HasPrefix(f[1], prefix) {
			continue
		}
		switch f[0] {
		case "create":
			s := &set{typ: calc.IPSetType(f[2]), members: map[string]struct{}{}}
			if i := slices.Index(f, "maxelem"); i > 0 && i+1 < len(f) {
				s.max, _ = strconv.Atoi(f[i+1])
			}
			sets[f[1]] = s
		case "add":
			s := sets[f[1]]
			if s == nil {
				return nil, fmt.Errorf("ipset save: member %q of set %s before its create line", f[2], f[1])
			}
			s.members[f[2]] = struct{}{}
		}
	}
	return sets, sc.Err()
}

func equal(a, b *set) bool {
	if a.typ != b.typ || len(a.members) != len(b.members) {
		return false
	}
	for mb := range b.members {
		if _, ok := a.members[mb]; !ok {
			return false
		}
	}
	return true
}

func (m *Manager) family6() string {
	if m.family == 6 {
		return "inet6"
	}
	return "inet"
}

// tempName is the name a set is filled under before the swap.
func (m *Manager) tempName(name string) string { return m.prefix + "t" + name[len(m.prefix)+1:] }

// ApplyUpdates creates and updates the sets that changed, in one
// `ipset restore`. Call it before the rules that use the sets are written.
func (m *Manager) ApplyUpdates(ctx context.Context) error {
	if m.resync {
		if err := m.read(ctx); err != nil {
			return err
		}
		// Leftover temporary sets (an interrupted swap) are removed.
		for name := range m.kernel {
			if strings.HasPrefix(name, m.prefix+"t") {
				m.dirty[name] = struct{}{}
			}
		}
	}
	if len(m.dirty) == 0 {
		return nil
	}
	if m.applyNetlink() {
		return nil
	}
	var b strings.Builder
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range m.dirty {
			if !yield(n) {
				return
			}
		}
	})
	var written []string
	for _, name := range names {
		want := m.desired[name]
		if want == nil {
			continue // destroyed by ApplyDeletions
		}
		have := m.kernel[name]
		create := func(n string) {
			fmt.Fprintf(&b, "create %s %s family %s maxelem %d\n", n, want.typ, m.family6(), m.maxElem)
		}
		switch {
		case have == nil:
			create(name)
			for mb := range want.members {
				fmt.Fprintf(&b, "add %s %s\n", name, mb)
			}
		case have.typ != want.typ:
			// Recreate: the set's rules were rewritten by then.
			fmt.Fprintf(&b, "destroy %s\n", name)
			create(name)
			for mb := range want.members {
				fmt.Fprintf(&b, "add %s %s\n", name, mb)
			}
		default:
			var adds, dels []string
			for mb := range want.members {
				if _, ok := have.members[mb]; !ok {
					adds = append(adds, mb)
				}
			}
			for mb := range have.members {
				if _, ok := want.members[mb]; !ok {
					dels = append(dels, mb)
				}
			}
			if n := len(adds) + len(dels); n > swapThreshold && n > len(want.members)/2 || have.max != m.maxElem {
				tmp := m.tempName(name)
				create(tmp)
				fmt.Fprintf(&b, "flush %s\n", tmp)
				for mb := range want.members {
					fmt.Fprintf(&b, "add %s %s\n", tmp, mb)
				}
				fmt.Fprintf(&b, "swap %s %s\ndestroy %s\n", tmp, name, tmp)
			} else {
				for _, mb := range dels {
					fmt.Fprintf(&b, "del %s %s\n", name, mb)
				}
				for _, mb := range adds {
					fmt.Fprintf(&b, "add %s %s\n", name, mb)
				}
			}
		}
		written = append(written, name)
	}
	for _, name := range names {
		if strings.HasPrefix(name, m.prefix+"t") && m.kernel[name] != nil {
			fmt.Fprintf(&b, "destroy %s\n", name)
		}
	}
	if b.Len() > 0 {
		_, err := m.run.RunWarm(ctx, b.String(), "ipset", "restore", "-exist")
		m.metrics.IPSet(err)
		if err != nil {
			m.resync = true
			return fmt.Errorf("writing IP sets (family %d): %w", m.family, err)
		}
	}
	for _, name := range written {
		m.kernel[name] = m.desired[name].clone()
		m.kernel[name].max = m.maxElem
	}
	for _, name := range names {
		if strings.HasPrefix(name, m.prefix+"t") {
			delete(m.kernel, name)
		}
		delete(m.dirty, name)
	}
	m.log.WithField("sets", len(written)).Debug("IP sets written")
	return nil
}

// ApplyDeletions destroys our sets that are no longer wanted. Call it after
// the rules that used them were removed. A set still in use by a rule
// stays and is retried next time.
func (m *Manager) ApplyDeletions(ctx context.Context) error {
	var stale []string
	for name := range m.kernel {
		if m.desired[name] == nil {
			stale = append(stale, name)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	slices.Sort(stale)
	if m.nl != nil {
		// Through netlink first: no process to start.
		left := stale[:0]
		for _, name := range stale {
			if err := m.nl.IpsetDestroy(name); err != nil {
				left = append(left, name)
				continue
			}
			delete(m.kernel, name)
		}
		if stale = left; len(stale) == 0 {
			return nil
		}
	}
	var b strings.Builder
	for _, name := range stale {
		fmt.Fprintf(&b, "destroy %s\n", name)
	}
	_, err := m.run.RunWarm(ctx, b.String(), "ipset", "restore", "-exist")
	m.metrics.IPSet(err)
	if err == nil {
		for _, name := range stale {
			delete(m.kernel, name)
		}
		return nil
	}
	// One at a time, so one set still referenced does not keep the rest.
	var firstErr error
	for _, name := range stale {
		_, err := m.run.Run(ctx, "", "ipset", "destroy", name)
		m.metrics.IPSet(err)
		if err != nil {
			if strings.Contains(err.Error(), "does not exist") {
				delete(m.kernel, name)
				continue
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("destroying IP set %s: %w", name, err)
			}
			continue
		}
		delete(m.kernel, name)
	}
	return firstErr
}

// Close releases the netlink handle.
func (m *Manager) Close() {
	if m.nl != nil {
		m.nl.Close()
	}
}

// entry turns a member string into a netlink ipset entry.
func entry(typ calc.IPSetType, member string) (*netlink.IPSetEntry, error) {
	addr, portPart, hasPort := strings.Cut(member, ",")
	if typ == calc.IPSetIPPort {
		if !hasPort {
			return nil, fmt.Errorf("member %q: want ip,proto:port", member)
		}
		proto, port, ok := strings.Cut(portPart, ":")
		n, err := strconv.ParseUint(port, 10, 16)
		if !ok || err != nil {
			return nil, fmt.Errorf("member %q: bad port", member)
		}
		num := map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132}[proto]
		if num == 0 {
			return nil, fmt.Errorf("member %q: unknown protocol %q", member, proto)
		}
		ip := net.ParseIP(addr)
		if ip == nil {
			return nil, fmt.Errorf("member %q: bad address", member)
		}
		p16 := uint16(n)
		return &netlink.IPSetEntry{IP: ip, Protocol: &num, Port: &p16}, nil
	}
	p, err := calc.ParseNet(addr)
	if err != nil {
		return nil, err
	}
	return &netlink.IPSetEntry{IP: p.Addr().AsSlice(), CIDR: uint8(p.Bits())}, nil
}

// applyNetlink writes the pending changes through netlink when they are
// only a few member additions and removals of sets the kernel has, and
// reports whether it did. Anything else (or an error) is left to ipset
// restore.
func (m *Manager) applyNetlink() bool {
	if m.nl == nil {
		return false
	}
	type op struct {
		name string
		add  bool
		e    *netlink.IPSetEntry
	}
	var ops []op
	var creates []string
	for name := range m.dirty {
		want, have := m.desired[name], m.kernel[name]
		if want == nil || strings.HasPrefix(name, m.prefix+"t") {
			return false
		}
		if have == nil {
			// A new small set: created through netlink too.
			creates = append(creates, name)
			have = &set{typ: want.typ, max: m.maxElem}
		}
		if have.max != m.maxElem {
			return false // rebuilt at the new size by ipset restore
		}
		if want.typ != have.typ {
			return false
		}
		for mb := range want.members {
			if _, ok := have.members[mb]; !ok {
				e, err := entry(want.typ, mb)
				if err != nil {
					return false
				}
				ops = append(ops, op{name, true, e})
			}
		}
		for mb := range have.members {
			if _, ok := want.members[mb]; !ok {
				e, err := entry(want.typ, mb)
				if err != nil {
					return false
				}
				ops = append(ops, op{name, false, e})
			}
		}
		if len(ops) > netlinkMax {
			return false
		}
	}
	family := uint8(unix.NFPROTO_IPV4)
	if m.family == 6 {
		family = unix.NFPROTO_IPV6
	}
	for _, name := range creates {
		err := m.nl.IpsetCreate(name, string(m.desired[name].typ), netlink.IpsetCreateOptions{Family: family, MaxElements: uint32(m.maxElem), Revision: revision[m.desired[name].typ]})
		if err != nil {
			m.metrics.IPSet(err)
			m.log.WithError(err).WithField("set", name).Debug("netlink IP set create failed; falling back to ipset restore")
			m.resync = true
			return false
		}
	}
	for _, o := range ops {
		var err error
		if o.add {
			err = m.nl.IpsetAdd(o.name, o.e)
		} else {
			err = m.nl.IpsetDel(o.name, o.e)
		}
		if err != nil {
			// ipset restore -exist finishes the job from the kernel's
			// state as read back.
			m.metrics.IPSet(err)
			m.log.WithError(err).WithField("set", o.name).Debug("netlink IP set write failed; falling back to ipset restore")
			m.resync = true
			return false
		}
	}
	if len(creates)+len(ops) > 0 {
		m.metrics.IPSet(nil)
	}
	for name := range m.dirty {
		m.kernel[name] = m.desired[name].clone()
		m.kernel[name].max = m.maxElem
		delete(m.dirty, name)
	}
	return true
}
