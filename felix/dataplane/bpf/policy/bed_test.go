package policy

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// bed is a namespace with two veth interfaces and the objects loaded into
// it; programs run on packets through BPF_PROG_TEST_RUN with the skb on
// one of the interfaces.
type bed struct {
	t    testing.TB
	run  *nsexec.Runner
	objs *bpf.Objects
	// a and b are interface indexes.
	a, b  int
	slots uint32
	progs []*ebpf.Program
	// eng is the policy engine, in the namespace's pal_pol.
	eng *Engine
}

func newBed(t testing.TB) *bed { return newBedWith(t, bpf.Timeouts{}) }

// newBedWith is newBed with conntrack timeouts.
func newBedWith(t testing.TB, timeouts bpf.Timeouts) *bed {
	nstest.RequireRoot(t)
	ns := nstest.New(t, nstest.Prefix(), "bpf")
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	ns.MustRun(t, "ip", "link", "add", "cali0a", "type", "veth", "peer", "name", "cali0b")
	ns.MustRun(t, "ip", "link", "set", "cali0a", "up")
	ns.MustRun(t, "ip", "link", "set", "cali0b", "up")
	e := &bed{t: t, run: run, slots: bpf.FirstPolicySlot}
	_ = run.Do(func() error {
		for _, x := range []struct {
			name string
			idx  *int
		}{{"cali0a", &e.a}, {"cali0b", &e.b}} {
			l, err := netlink.LinkByName(x.name)
			if err != nil {
				return err
			}
			*x.idx = l.Attrs().Index
		}
		return nil
	})
	// A small conntrack map: clearCT walks it, and walking the default
	// size's buckets took most of the differential test's time.
	e.objs, err = bpf.Open(bpf.Options{NS: run, Timeouts: timeouts, ConntrackEntries: 4096})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := e.objs.MapPolicyMemory()
	if err != nil {
		t.Fatal(err)
	}
	if e.eng, err = NewEngine(mem, bpf.ID6{M: e.objs.Maps[bpf.MapID6]}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range e.progs {
			p.Close()
		}
		mem.Close()
		e.objs.Close()
		if err := bpf.RemoveDir(e.objs.Dir, nil); err != nil {
			t.Error(err)
		}
	})
	return e
}

// load compiles and loads a stage and returns its slot.
func (e *bed) load(in Input) uint32 {
	e.t.Helper()
	p, err := Compile(in)
	if err != nil {
		e.t.Fatal(err)
	}
	info, _ := json.Marshal(p.Slots)
	prog, err := e.objs.LoadPolicy("pal_test", p.Insns, info)
	if err != nil {
		e.t.Fatalf("%v\n%v", err, p.Insns)
	}
	e.progs = append(e.progs, prog)
	slot := e.slots
	e.slots++
	if err := e.objs.Maps[bpf.MapProgs].Put(slot, uint32(prog.FD())); err != nil {
		e.t.Fatal(err)
	}
	return slot
}

// loadEngine lays a stage out for the policy engine, loads its stub and
// returns its slot.
func (e *bed) loadEngine(in Input) uint32 {
	e.t.Helper()
	t, err := CompileTable(in)
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := e.eng.Stage(t)
	if err != nil {
		e.t.Fatal(err)
	}
	info, _ := json.Marshal(t.Slots)
	prog, err := e.objs.LoadPolicy("pal_test", Stub(), info)
	if err != nil {
		e.t.Fatal(err)
	}
	e.progs = append(e.progs, prog)
	slot := e.slots
	e.slots++
	if err := e.eng.Bind(slot, st); err != nil {
		e.t.Fatal(err)
	}
	if err := e.objs.Maps[bpf.MapProgs].Put(slot, uint32(prog.FD())); err != nil {
		e.t.Fatal(err)
	}
	return slot
}

// endpoint writes an interface's entry and its allowed sources; the
// entry holds the first IPv4 /32 of them as its own address, as felix
// writes it.
func (e *bed) endpoint(ifindex int, flags uint32, slots map[int]uint32, sources ...string) {
	e.t.Helper()
	src4 := uint32(0)
	for _, s := range sources {
		if p := netip.MustParsePrefix(s); p.Addr().Is4() && p.Bits() == 32 && src4 == 0 {
			src4 = bpf.Src4(p.Addr())
		}
	}
	e.entry(ifindex, bpf.Endpoint{Flags: flags, L2len: 14, Src4: src4}, slots, sources...)
}

// entry writes ep, with slots, as an interface's entry, and its allowed
// sources.
func (e *bed) entry(ifindex int, ep bpf.Endpoint, slots map[int]uint32, sources ...string) {
	e.t.Helper()
	for st, s := range slots {
		ep.Slots[st] = s
	}
	if err := e.objs.Maps[bpf.MapEndpoint].Put(uint32(ifindex), ep); err != nil {
		e.t.Fatal(err)
	}
	for _, s := range sources {
		p := netip.MustParsePrefix(s)
		k := bpf.SrcKey{Prefixlen: uint32(32 + bpf.PrefixLen16(p)), Ifindex: uint32(ifindex), Addr: bpf.Addr16(p.Addr())}
		if err := e.objs.Maps[bpf.MapSrc].Put(k, uint8(1)); err != nil {
			e.t.Fatal(err)
		}
	}
}

// memberOf adds a member to an IP set: an address, a CIDR, or
// "addr,proto:port" (a named-port set).
func (e *bed) memberOf(set, m string) {
	e.t.Helper()
	id := bpf.SetID(set)
	if addr, pp, ok := strings.Cut(m, ","); ok {
		proto, port, _ := strings.Cut(pp, ":")
		n, _ := strconv.Atoi(port)
		k := bpf.PortKey{IdHi: uint32(id >> 32), IdLo: uint32(id), Addr: bpf.Addr16(netip.MustParseAddr(addr)), Port: uint16(n),
			Proto: map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132}[proto]}
		if err := e.objs.Maps[bpf.MapPorts].Put(k, uint8(1)); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	p, err := netip.ParsePrefix(m)
	if err != nil {
		a := netip.MustParseAddr(m)
		p = netip.PrefixFrom(a, a.BitLen())
	}
	for _, k := range bpf.SetKeys(id, p) {
		if err := e.objs.Maps[bpf.MapSets].Put(k, uint8(1)); err != nil {
			e.t.Fatal(err)
		}
	}
	e.eng.MemberDelta(set, []string{m}, nil)
	if err := e.eng.Sync(); err != nil {
		e.t.Fatal(err)
	}
}

// notMemberOf removes a member of a net set.
func (e *bed) notMemberOf(set, m string) {
	e.t.Helper()
	p, err := netip.ParsePrefix(m)
	if err != nil {
		a := netip.MustParseAddr(m)
		p = netip.PrefixFrom(a, a.BitLen())
	}
	for _, k := range bpf.SetKeys(bpf.SetID(set), p) {
		if err := e.objs.Maps[bpf.MapSets].Delete(k); err != nil {
			e.t.Fatal(err)
		}
	}
	e.eng.MemberDelta(set, nil, []string{m})
	if err := e.eng.Sync(); err != nil {
		e.t.Fatal(err)
	}
}

// clearCT empties the conntrack map.
func (e *bed) clearCT() {
	var k bpf.CTKey
	var v bpf.CTValue
	var keys []bpf.CTKey
	it := e.objs.Maps[bpf.MapCT].Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	for _, k := range keys {
		_ = e.objs.Maps[bpf.MapCT].Delete(k)
	}
}

// skbCtx is the start of struct __sk_buff up to what a test run takes.
type skbCtx struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority, IngressIfindex, Ifindex uint32
	Rest                                                                                                           [192 - 44]byte
}

// send runs the entry program of a kind and hook on a packet arriving on
// (In) or leaving by (Out) ifindex; fromIf is the ingress interface of a
// forwarded packet (0: from the host). It returns the TCX verdict and the
// mark.
func (e *bed) send(host bool, hook bpf.Hook, ifindex, fromIf int, pkt []byte) (int32, uint32) {
	e.t.Helper()
	kind := 0
	if host {
		kind = 1
	}
	prog := e.objs.Entry[kind][hook]
	var ret uint32
	out := skbCtx{}
	err := e.run.Do(func() error {
		in := skbCtx{Ifindex: uint32(ifindex), IngressIfindex: uint32(fromIf)}
		var err error
		ret, err = prog.Run(&ebpf.RunOptions{Data: pkt, Context: in, ContextOut: &out})
		return err
	})
	if err != nil {
		e.t.Fatalf("test run: %v", err)
	}
	return int32(ret), out.Mark
}

// packet is a packet to build.
type packet struct {
	src, dst     string
	proto        uint8
	sport, dport uint16
	icmpType     uint8
	icmpCode     uint8
	tcpFlags     uint8
	payload      []byte
}

const (
	tcpSYN = 0x02
	tcpACK = 0x10
)

// bytes builds Ethernet + IP + the layer 4 header.
func (p packet) bytes() []byte {
	src, dst := netip.MustParseAddr(p.src), netip.MustParseAddr(p.dst)
	var l4 []byte
	switch p.proto {
	case 6:
		l4 = make([]byte, 20)
		binary.BigEndian.PutUint16(l4[0:], p.sport)
		binary.BigEndian.PutUint16(l4[2:], p.dport)
		l4[12] = 5 << 4
		l4[13] = p.tcpFlags
	case 17, 132:
		// SCTP's common header is 12 bytes (iptables' sctp match drops
		// a shorter one).
		l4 = make([]byte, map[uint8]int{17: 8, 132: 12}[p.proto])
		binary.BigEndian.PutUint16(l4[0:], p.sport)
		binary.BigEndian.PutUint16(l4[2:], p.dport)
	case 1, 58:
		l4 = make([]byte, 8)
		l4[0] = p.icmpType
		l4[1] = p.icmpCode
		binary.BigEndian.PutUint16(l4[4:], p.sport)
	default:
		l4 = make([]byte, 8)
	}
	l4 = append(l4, p.payload...)
	eth := make([]byte, 14)
	copy(eth[0:6], []byte{0xee, 0xee, 0xee, 0xee, 0xee, 0xee})
	copy(eth[6:12], []byte{0x02, 0, 0, 0, 0, 1})
	if src.Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		ip[8] = 64
		ip[9] = p.proto
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		return append(append(eth, ip...), l4...)
	}
	binary.BigEndian.PutUint16(eth[12:], 0x86dd)
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
	ip[6] = p.proto
	ip[7] = 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	return append(append(eth, ip...), l4...)
}

func (p packet) String() string {
	return fmt.Sprintf("%s:%d→%s:%d/%d", p.src, p.sport, p.dst, p.dport, p.proto)
}

var _ = net.IPv4len
