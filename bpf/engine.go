package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ErrNoEngine: the object loaded has no policy engine (Options.NoLoop).
var ErrNoEngine = errors.New("bpf: the object loaded has no policy engine (no bpf_loop)")

// PolicyMemory is the policy engine's map (MapPolicy, c/engine.h) mapped
// into felix: 64-bit words, written with atomic stores of a word or an
// aligned half while the programs read them.
type PolicyMemory struct {
	b []byte
	w []uint64
}

// MapPolicyMemory maps MapPolicy. The object without the policy engine
// (Options.NoLoop) has none: ErrNoEngine.
func (o *Objects) MapPolicyMemory() (*PolicyMemory, error) {
	if !o.Engine || o.Maps[MapPolicy] == nil {
		return nil, ErrNoEngine
	}
	return MapPolicyMemoryOf(o.Maps[MapPolicy], true)
}

// MapPolicyMemoryOf maps m, a MapPolicy (read-only unless writable: its
// stores then fault).
func MapPolicyMemoryOf(m *ebpf.Map, writable bool) (*PolicyMemory, error) {
	size := int(m.ValueSize())
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	b, err := unix.Mmap(m.FD(), 0, size, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("bpf: mapping %s: %w", MapPolicy, err)
	}
	return &PolicyMemory{b: b, w: unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), size/8)}, nil
}

// Close unmaps it.
func (p *PolicyMemory) Close() error {
	if p.b == nil {
		return nil
	}
	err := unix.Munmap(p.b)
	p.b, p.w = nil, nil
	return err
}

// Words is the size in words.
func (p *PolicyMemory) Words() uint32 { return uint32(len(p.w)) }

// Load reads word i.
func (p *PolicyMemory) Load(i uint32) uint64 { return atomic.LoadUint64(&p.w[i]) }

// Store writes word i.
func (p *PolicyMemory) Store(i uint32, v uint64) { atomic.StoreUint64(&p.w[i], v) }

// half is the 32-bit half i (the low half of word i/2 first, as the
// programs read it on a little-endian machine).
func (p *PolicyMemory) half(i uint32) *uint32 {
	return (*uint32)(unsafe.Add(unsafe.Pointer(&p.w[i/2]), 4*(i%2)))
}

// Load32 reads half i.
func (p *PolicyMemory) Load32(i uint32) uint32 { return atomic.LoadUint32(p.half(i)) }

// Store32 writes half i.
func (p *PolicyMemory) Store32(i uint32, v uint32) { atomic.StoreUint32(p.half(i), v) }

// ID6 is MapID6: the engine's identities of IPv6 prefixes, by
// generation.
type ID6 struct{ M *ebpf.Map }

func id6Key(p netip.Prefix, gen uint32) ID6Key {
	return ID6Key{Prefixlen: uint32(32 + p.Bits()), Gen: gen, Addr: p.Masked().Addr().As16()}
}

// Put writes a prefix's identity.
func (x ID6) Put(p netip.Prefix, gen, id uint32) error { return x.M.Put(id6Key(p, gen), id) }

// Delete removes a prefix.
func (x ID6) Delete(p netip.Prefix, gen uint32) error {
	err := x.M.Delete(id6Key(p, gen))
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// Sweep deletes the prefixes of every generation but keep.
func (x ID6) Sweep(keep uint32) error {
	var k ID6Key
	var v uint32
	var stale []ID6Key
	it := x.M.Iterate()
	for it.Next(&k, &v) {
		if k.Gen != keep {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("bpf: reading %s: %w", MapID6, err)
	}
	for _, k := range stale {
		if err := x.M.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("bpf: deleting from %s: %w", MapID6, err)
		}
	}
	return nil
}
