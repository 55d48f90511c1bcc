// Package inspect reads back what the eBPF dataplane of a network
// namespace holds — interfaces' entries and their policy programs' rules,
// per-rule and per-reason counters, conntrack, IP sets — from the pinned
// maps and the programs' own descriptions, for `calico-node bpf …` and for
// tests. It changes nothing.
package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf"

	palbpf "github.com/palisade-net/palisade/bpf"
)

// View is a namespace's pinned maps, opened read-only.
type View struct {
	Dir     string
	mapsDir string
	maps    map[string]*ebpf.Map
	ns      palbpf.NetNS
}

// ErrNotProgrammed says the namespace has no eBPF dataplane.
var ErrNotProgrammed = errors.New("no eBPF dataplane in this network namespace")

// Open opens the maps of the namespace ns (nil: the current one) under
// root (palbpf.DefaultRoot when empty).
func Open(root string, ns palbpf.NetNS) (*View, error) {
	if root == "" {
		root = palbpf.DefaultRoot
	}
	id, err := palbpf.NamespaceID(ns)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, id)
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNotProgrammed)
	}
	if err != nil {
		return nil, err
	}
	// The newest maps directory is the running felix's.
	var mapsDir string
	var newest int64
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "maps-") {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().UnixNano() >= newest {
			newest, mapsDir = fi.ModTime().UnixNano(), filepath.Join(dir, e.Name())
		}
	}
	if mapsDir == "" {
		return nil, fmt.Errorf("%s: %w", dir, ErrNotProgrammed)
	}
	v := &View{Dir: dir, mapsDir: mapsDir, maps: map[string]*ebpf.Map{}, ns: ns}
	for _, name := range []string{palbpf.MapEndpoint, palbpf.MapProgs, palbpf.MapSets, palbpf.MapPorts, "pal_setnames", palbpf.MapCT, palbpf.MapCounters, palbpf.MapSrc} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(mapsDir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			v.Close()
			return nil, fmt.Errorf("opening %s: %w", name, err)
		}
		v.maps[name] = m
	}
	return v, nil
}

// PolicyMemory maps the policy engine's memory (MapPolicy) read-only;
// the caller closes it.
func (v *View) PolicyMemory() (*palbpf.PolicyMemory, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(v.mapsDir, palbpf.MapPolicy), nil)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", palbpf.MapPolicy, err)
	}
	defer m.Close()
	return palbpf.MapPolicyMemoryOf(m, false)
}

// Close releases the maps.
func (v *View) Close() {
	for _, m := range v.maps {
		m.Close()
	}
}

// Interface is one interface's entry and what its stages run.
type Interface struct {
	Ifindex int
	Name    string
	// Kind is "workload", "host", "data" (a host data interface, whose
	// programs load-balance traffic from outside and send established
	// flows to workloads on), "tunnel" (the node port tunnel's device) or
	// "blocked" (an unknown workload interface: everything drops).
	Kind     string
	ToHostOK bool
	Sources  []netip.Prefix
	Stages   [palbpf.Stages]*Stage
}

// Stage is a stage's program.
type Stage struct {
	Slot    uint32
	Program ebpf.ProgramID
	Name    string
	Desc    *palbpf.Description
}

// Interfaces reads every entry, by interface name.
func (v *View) Interfaces() ([]Interface, error) {
	names := v.ifaceNames()
	var out []Interface
	var idx uint32
	var ep palbpf.Endpoint
	it := v.maps[palbpf.MapEndpoint].Iterate()
	for it.Next(&idx, &ep) {
		in := Interface{Ifindex: int(idx), Name: names[int(idx)], ToHostOK: ep.Flags&palbpf.EndpointToHostDrop == 0}
		switch {
		case ep.Flags&palbpf.EndpointBlocked != 0:
			in.Kind = "blocked"
		case ep.Flags&palbpf.EndpointHost != 0:
			in.Kind = "host"
		case ep.Flags&palbpf.EndpointData != 0:
			in.Kind = "data"
		case ep.Flags&palbpf.EndpointTunnel != 0:
			in.Kind = "tunnel"
		default:
			in.Kind = "workload"
		}
		for i, slot := range ep.Slots {
			if slot != 0 {
				in.Stages[i] = v.stage(slot)
			}
		}
		out = append(out, in)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	srcs := map[uint32][]netip.Prefix{}
	var sk palbpf.SrcKey
	var one uint8
	it = v.maps[palbpf.MapSrc].Iterate()
	for it.Next(&sk, &one) {
		srcs[sk.Ifindex] = append(srcs[sk.Ifindex], prefix16(sk.Addr, int(sk.Prefixlen)-32))
	}
	for i := range out {
		out[i].Sources = srcs[uint32(out[i].Ifindex)]
		sort.Slice(out[i].Sources, func(a, b int) bool { return out[i].Sources[a].String() < out[i].Sources[b].String() })
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Name < out[j].Name || out[i].Name == out[j].Name && out[i].Ifindex < out[j].Ifindex
	})
	return out, nil
}

func (v *View) stage(slot uint32) *Stage {
	s := &Stage{Slot: slot}
	var id uint32
	if err := v.maps[palbpf.MapProgs].Lookup(slot, &id); err != nil {
		return s
	}
	s.Program = ebpf.ProgramID(id)
	p, err := ebpf.NewProgramFromID(s.Program)
	if err != nil {
		return s
	}
	defer p.Close()
	if info, err := p.Info(); err == nil {
		s.Name = info.Name
	}
	if raw, err := palbpf.ProgramInfo(p); err == nil && raw != nil {
		var d palbpf.Description
		if json.Unmarshal([]byte(strings.TrimRight(string(raw), "\x00")), &d) == nil {
			s.Desc = &d
		}
	}
	return s
}

// ifaceNames maps the namespace's interface indexes to names.
func (v *View) ifaceNames() map[int]string {
	out := map[int]string{}
	do := func(f func() error) error { return f() }
	if v.ns != nil {
		do = v.ns.Do
	}
	_ = do(func() error {
		ifs, err := net.Interfaces()
		for _, i := range ifs {
			out[i.Index] = i.Name
		}
		return err
	})
	return out
}

func prefix16(a [16]byte, bits int) netip.Prefix {
	addr := netip.AddrFrom16(a)
	if addr.Is4In6() && bits >= 96 {
		return netip.PrefixFrom(addr.Unmap(), bits-96)
	}
	return netip.PrefixFrom(addr, bits)
}

// Policies lists the policies ("tier/name" or "tier/namespace/name") and
// profiles ("profile/name") some interface's program enforces.
func (v *View) Policies() (map[string]bool, error) {
	ifs, err := v.Interfaces()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, in := range ifs {
		for _, st := range in.Stages {
			if st == nil || st.Desc == nil {
				continue
			}
			for _, s := range st.Desc.Slots {
				switch {
				case s.Policy != "":
					out[s.Tier+"/"+s.Policy] = true
				case s.Profile != "":
					out["profile/"+s.Profile] = true
				}
			}
		}
	}
	return out, nil
}

// Counter is a packet and byte count of an interface.
type Counter struct {
	Ifindex int
	// Stage is a palbpf.Stage* or palbpf.StageGeneral (then Rule is a
	// reason, palbpf.Reasons).
	Stage int
	// Rule is the counted rule's id (palbpf.Slot.ID) in its stage.
	Rule    uint64
	Packets uint64
	Bytes   uint64
}

// CounterKey names a counter: interface, stage and rule id.
type CounterKey struct {
	Ifindex, Stage int
	Rule           uint64
}

// Key is c's key.
func (c Counter) Key() CounterKey { return CounterKey{c.Ifindex, c.Stage, c.Rule} }

// Counters reads every counter, summed over the CPUs.
func (v *View) Counters() ([]Counter, error) { return ReadCounters(v.maps[palbpf.MapCounters]) }

// interfacesAndCounters reads the interfaces and every counter.
func (v *View) interfacesAndCounters() ([]Interface, []Counter, error) {
	ifs, err := v.Interfaces()
	if err != nil {
		return nil, nil, err
	}
	cs, err := v.Counters()
	return ifs, cs, err
}

// ReasonPackets is the packets the programs of the interface named iface
// counted for a general reason (one of palbpf.Reasons).
func (v *View) ReasonPackets(iface, reason string) (uint64, error) {
	ifs, cs, err := v.interfacesAndCounters()
	if err != nil {
		return 0, err
	}
	n := uint64(0)
	for _, in := range ifs {
		if in.Name != iface {
			continue
		}
		for _, c := range cs {
			if c.Ifindex == in.Ifindex && c.Stage == palbpf.StageGeneral && int(c.Rule) < len(palbpf.Reasons) && palbpf.Reasons[c.Rule] == reason {
				n += c.Packets
			}
		}
	}
	return n, nil
}

// ReadCounters reads every counter of a counters map, summed over the
// CPUs.
func ReadCounters(m *ebpf.Map) ([]Counter, error) {
	var out []Counter
	var k palbpf.CounterKey
	var per []palbpf.CounterValue
	it := m.Iterate()
	for it.Next(&k, &per) {
		c := Counter{Ifindex: int(k.Ifindex), Stage: int(k.Stage), Rule: k.Rule}
		for _, n := range per {
			c.Packets += n.Packets
			c.Bytes += n.Bytes
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Ifindex != b.Ifindex {
			return a.Ifindex < b.Ifindex
		}
		if a.Stage != b.Stage {
			return a.Stage < b.Stage
		}
		return a.Rule < b.Rule
	})
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("reading %s: %w", palbpf.MapCounters, err)
	}
	return out, nil
}

func countsOf(cs []Counter) map[CounterKey]Counter {
	out := map[CounterKey]Counter{}
	for _, c := range cs {
		out[c.Key()] = c
	}
	return out
}

// RuleCount is how many packets the rules of a policy (or profile, as
// "profile/name") with action counted at ifaceName's stages (every
// interface when ifaceName is "").
func (v *View) RuleCount(ifaceName, policyKey, action string) (uint64, error) {
	ifs, cs, err := v.interfacesAndCounters()
	if err != nil {
		return 0, err
	}
	count := countsOf(cs)
	var n uint64
	for _, in := range ifs {
		if ifaceName != "" && in.Name != ifaceName {
			continue
		}
		for st, s := range in.Stages {
			if s == nil || s.Desc == nil {
				continue
			}
			for _, sl := range s.Desc.Slots {
				key := sl.Tier + "/" + sl.Policy
				if sl.Profile != "" {
					key = "profile/" + sl.Profile
				}
				if key == policyKey && sl.Action == action {
					n += count[CounterKey{in.Ifindex, st, sl.ID}].Packets
				}
			}
		}
	}
	return n, nil
}

// Flow is a conntrack entry.
type Flow struct {
	Ifindex      int
	Iface        string
	Proto        uint8
	A, B         netip.Addr
	PortA, PortB uint16
	// Opener is the side that sent the first packet.
	Opener   string
	Flags    uint32
	Created  uint64
	LastSeen uint64
}

// Conntrack reads every conntrack entry.
func (v *View) Conntrack() ([]Flow, error) {
	names := v.ifaceNames()
	var out []Flow
	var k palbpf.CTKey
	var val palbpf.CTValue
	it := v.maps[palbpf.MapCT].Iterate()
	for it.Next(&k, &val) {
		f := Flow{Ifindex: int(k.Ifindex), Iface: names[int(k.Ifindex)], Proto: k.Proto,
			A: netip.AddrFrom16(k.A).Unmap(), B: netip.AddrFrom16(k.B).Unmap(), PortA: k.Pa, PortB: k.Pb,
			Flags: val.Flags, Created: val.Created, LastSeen: val.LastSeen, Opener: "b"}
		if val.Flags&0x01 != 0 {
			f.Opener = "a"
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Iface != out[j].Iface {
			return out[i].Iface < out[j].Iface
		}
		return fmt.Sprint(out[i].A, out[i].PortA, out[i].B, out[i].PortB) < fmt.Sprint(out[j].A, out[j].PortA, out[j].B, out[j].PortB)
	})
	return out, it.Err()
}

// IPSets reads the IP sets: calc id (or the 64-bit id in hex when its
// name is unknown) → members, sorted.
func (v *View) IPSets() (map[string][]string, error) {
	names := map[uint64]string{}
	var id uint64
	name := make([]byte, 64)
	it := v.maps["pal_setnames"].Iterate()
	for it.Next(&id, &name) {
		names[id] = strings.TrimRight(string(name), "\x00")
	}
	nameOf := func(hi, lo uint32) string {
		id := uint64(hi)<<32 | uint64(lo)
		if n, ok := names[id]; ok {
			return n
		}
		return fmt.Sprintf("%#016x", id)
	}
	out := map[string][]string{}
	for _, n := range names {
		out[n] = nil
	}
	var sk palbpf.SetKey
	var one uint8
	it = v.maps[palbpf.MapSets].Iterate()
	for it.Next(&sk, &one) {
		p := prefix16(sk.Addr, int(sk.Prefixlen)-64)
		m := p.String()
		if p.IsSingleIP() {
			m = p.Addr().String()
		}
		out[nameOf(sk.IdHi, sk.IdLo)] = append(out[nameOf(sk.IdHi, sk.IdLo)], m)
	}
	var pk palbpf.PortKey
	it2 := v.maps[palbpf.MapPorts].Iterate()
	for it2.Next(&pk, &one) {
		proto := map[uint8]string{6: "tcp", 17: "udp", 132: "sctp"}[pk.Proto]
		n := nameOf(pk.IdHi, pk.IdLo)
		out[n] = append(out[n], fmt.Sprintf("%s,%s:%d", netip.AddrFrom16(pk.Addr).Unmap(), proto, pk.Port))
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out, errors.Join(it.Err(), it2.Err())
}
