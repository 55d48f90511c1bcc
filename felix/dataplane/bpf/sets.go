package bpf

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
)

// setMaps keeps the IP set maps (pal_sets for hash:net, pal_ports for
// hash:ip,port, pal_setnames for dumps) equal to the calc's sets. It takes
// contents and deltas cheaply; Apply writes the keys that changed: the
// new ones before the programs that use them (applyAdds), the old ones
// after (applyRemovals). The kernel's keys are read back once at start.
type setMaps struct {
	members map[string]map[string][]setKey // calc id → member → its keys
	// want counts the members wanting each key (two members of a set may
	// share one: 10.0.0.1 and 10.0.0.1/32, or a piece of a split IPv6
	// member); have the keys in the kernel; dirty the keys whose two may
	// differ.
	want      map[setKey]int
	have      map[setKey]struct{}
	dirty     map[setKey]struct{}
	names     map[uint64]string // set id → calc id, wanted
	haveNames map[uint64]bool
	types     map[string]calc.IPSetType
	bad       map[string]bool // members already warned about
	log       *log.Entry
	// eng is the policy engine, which follows the hash:net sets' members
	// too: added ones at once (applied by its Sync before the stages),
	// removed ones in engGone until applyRemovals, after the programs.
	eng     *policy.Engine
	engGone map[string][]string
}

// attachEngine gives the engine every net set's members; it follows
// them from now on.
func (s *setMaps) attachEngine(eng *policy.Engine) {
	s.eng, s.engGone = eng, map[string][]string{}
	for id, ms := range s.members {
		if s.types[id] == calc.IPSetIPPort {
			continue
		}
		eng.MemberDelta(id, slices.Collect(maps.Keys(ms)), nil)
	}
}

// engineAdd and engineRemove follow one member of a set.
func (s *setMaps) engineAdd(id string, typ calc.IPSetType, m string) {
	if s.eng != nil && typ != calc.IPSetIPPort {
		s.eng.MemberDelta(id, []string{m}, nil)
	}
}

func (s *setMaps) engineRemove(id string, typ calc.IPSetType, m string) {
	if s.eng != nil && typ != calc.IPSetIPPort {
		s.engGone[id] = append(s.engGone[id], m)
	}
}

// syncEngine applies the members added to the engine (before the
// stages), and with removed the members removed (after them).
func (s *setMaps) syncEngine(removed bool) error {
	if s.eng == nil {
		return nil
	}
	if removed {
		for id, ms := range s.engGone {
			s.eng.MemberDelta(id, nil, ms)
		}
		clear(s.engGone)
	}
	return s.eng.Sync()
}

// setKey is a key of either map.
type setKey struct {
	port bool
	net  palbpf.SetKey
	pk   palbpf.PortKey
}

func newSetMaps(logger *log.Entry) *setMaps {
	return &setMaps{log: logger, types: map[string]calc.IPSetType{}, members: map[string]map[string][]setKey{}, want: map[setKey]int{}, have: map[setKey]struct{}{},
		dirty: map[setKey]struct{}{}, names: map[uint64]string{}, haveNames: map[uint64]bool{}, bad: map[string]bool{}}
}

// memberKeys are the map keys of a member of set id: one, except for an
// IPv6 CIDR covering the IPv4-mapped range (bpf.SetKeys).
func memberKeys(id string, typ calc.IPSetType, m string) ([]setKey, error) {
	k, p, err := memberKey(id, typ, m)
	if err != nil || typ == calc.IPSetIPPort {
		return []setKey{k}, err
	}
	var keys []setKey
	for _, nk := range palbpf.SetKeys(palbpf.SetID(id), p) {
		keys = append(keys, setKey{net: nk})
	}
	return keys, nil
}

// memberKey is the map key of a member of set id (and, for a CIDR, the
// masked prefix).
func memberKey(id string, typ calc.IPSetType, m string) (setKey, netip.Prefix, error) {
	sid := palbpf.SetID(id)
	hi, lo := uint32(sid>>32), uint32(sid)
	if typ == calc.IPSetIPPort {
		addr, pp, ok := strings.Cut(m, ",")
		proto, port, ok2 := strings.Cut(pp, ":")
		a, err := netip.ParseAddr(addr)
		n, err2 := strconv.ParseUint(port, 10, 16)
		num := map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132}[proto]
		if !ok || !ok2 || err != nil || err2 != nil || num == 0 {
			return setKey{}, netip.Prefix{}, fmt.Errorf("IP set %s: member %q is not ip,proto:port", id, m)
		}
		return setKey{port: true, pk: palbpf.PortKey{IdHi: hi, IdLo: lo, Addr: palbpf.Addr16(a), Port: uint16(n), Proto: num}}, netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(m)
	if err != nil {
		a, err2 := netip.ParseAddr(m)
		if err2 != nil {
			return setKey{}, netip.Prefix{}, fmt.Errorf("IP set %s: member %q is not an address or CIDR", id, m)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	p = p.Masked()
	return setKey{net: palbpf.SetKey{Prefixlen: uint32(64 + palbpf.PrefixLen16(p)), IdHi: hi, IdLo: lo, Addr: palbpf.Addr16(p.Addr())}}, p, nil
}

func (s *setMaps) set(id string, typ calc.IPSetType, members []string) {
	old := s.members[id]
	now := make(map[string][]setKey, len(members))
	for _, m := range members {
		if k, ok := old[m]; ok {
			now[m] = k
			continue
		}
		s.addMember(id, typ, m, now)
	}
	for m, ks := range old {
		if _, ok := now[m]; !ok {
			s.unwant(ks)
			s.engineRemove(id, s.types[id], m)
		}
	}
	s.members[id] = now
	s.types[id] = typ
	s.names[palbpf.SetID(id)] = id
}

func (s *setMaps) addMember(id string, typ calc.IPSetType, m string, into map[string][]setKey) {
	ks, err := memberKeys(id, typ, m)
	if err != nil {
		// calc writes only valid members; one that is not matches
		// nothing (the rule stays narrower, never wider).
		if !s.bad[id+m] {
			s.bad[id+m] = true
			s.log.WithError(err).Warn("IP set member left out")
		}
		return
	}
	into[m] = ks
	s.engineAdd(id, typ, m)
	for _, k := range ks {
		s.want[k]++
		s.dirty[k] = struct{}{}
	}
}

// unwant drops one member's keys; a key another member still wants stays.
func (s *setMaps) unwant(ks []setKey) {
	for _, k := range ks {
		if s.want[k]--; s.want[k] <= 0 {
			delete(s.want, k)
		}
		s.dirty[k] = struct{}{}
	}
}

func (s *setMaps) delta(id string, added, removed []string) {
	cur := s.members[id]
	if cur == nil {
		return
	}
	typ := s.types[id]
	for _, m := range added {
		if _, ok := cur[m]; !ok {
			s.addMember(id, typ, m, cur)
		}
	}
	for _, m := range removed {
		if ks, ok := cur[m]; ok {
			delete(cur, m)
			s.unwant(ks)
			s.engineRemove(id, typ, m)
		}
	}
}

func (s *setMaps) remove(id string) {
	for m, ks := range s.members[id] {
		s.unwant(ks)
		s.engineRemove(id, s.types[id], m)
	}
	delete(s.members, id)
	delete(s.types, id)
	delete(s.names, palbpf.SetID(id))
}

// readBack loads the kernel's keys; every key becomes dirty.
func (s *setMaps) readBack(objs *palbpf.Objects) error {
	s.have = map[setKey]struct{}{}
	var nk palbpf.SetKey
	var v uint8
	it := objs.Maps[palbpf.MapSets].Iterate()
	for it.Next(&nk, &v) {
		s.have[setKey{net: nk}] = struct{}{}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", palbpf.MapSets, err)
	}
	var pk palbpf.PortKey
	it = objs.Maps[palbpf.MapPorts].Iterate()
	for it.Next(&pk, &v) {
		s.have[setKey{port: true, pk: pk}] = struct{}{}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", palbpf.MapPorts, err)
	}
	for k := range s.have {
		s.dirty[k] = struct{}{}
	}
	for k := range s.want {
		s.dirty[k] = struct{}{}
	}
	s.haveNames = map[uint64]bool{}
	var id uint64
	name := make([]byte, 64)
	it = objs.Maps["pal_setnames"].Iterate()
	for it.Next(&id, &name) {
		s.haveNames[id] = true
	}
	return it.Err()
}

// applyAdds writes the wanted keys the kernel lacks (and the names).
func (s *setMaps) applyAdds(objs *palbpf.Objects) error {
	var errs []error
	for k := range s.dirty {
		if _, want := s.want[k]; !want {
			continue
		}
		if _, have := s.have[k]; !have {
			if err := s.put(objs, k); err != nil {
				errs = append(errs, err)
				continue
			}
			s.have[k] = struct{}{}
		}
		delete(s.dirty, k)
	}
	for id, name := range s.names {
		if s.haveNames[id] {
			continue
		}
		v := make([]byte, 64)
		copy(v, name)
		if err := objs.Maps["pal_setnames"].Put(id, v); err != nil {
			errs = append(errs, fmt.Errorf("IP set name %s: %w", name, err))
			continue
		}
		s.haveNames[id] = true
	}
	return errors.Join(errs...)
}

// applyRemovals deletes the kernel's keys no set wants.
func (s *setMaps) applyRemovals(objs *palbpf.Objects) error {
	var errs []error
	for k := range s.dirty {
		if _, want := s.want[k]; want {
			continue
		}
		if _, have := s.have[k]; have {
			var err error
			if k.port {
				err = objs.Maps[palbpf.MapPorts].Delete(k.pk)
			} else {
				err = objs.Maps[palbpf.MapSets].Delete(k.net)
			}
			if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("deleting an IP set member: %w", err))
				continue
			}
			delete(s.have, k)
		}
		delete(s.dirty, k)
	}
	for id := range s.haveNames {
		if _, ok := s.names[id]; !ok {
			if err := objs.Maps["pal_setnames"].Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
				continue
			}
			delete(s.haveNames, id)
		}
	}
	return errors.Join(errs...)
}

func (s *setMaps) put(objs *palbpf.Objects, k setKey) error {
	var err error
	if k.port {
		err = objs.Maps[palbpf.MapPorts].Put(k.pk, uint8(1))
	} else {
		err = objs.Maps[palbpf.MapSets].Put(k.net, uint8(1))
	}
	if err != nil {
		return fmt.Errorf("writing an IP set member: %w", err)
	}
	return nil
}
