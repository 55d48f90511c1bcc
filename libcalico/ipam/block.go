package ipam

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
)

// affinityPrefix starts a block's affinity field: "host:<node>".
const affinityPrefix = "host:"

// block is one allocation block as stored, in Calico's JSON shape. Ordinal
// i is the i-th address of the block; Allocations[i] is the index of its
// attribute, or nil when free; Unallocated lists the free ordinals in the
// order they will be handed out (released ones go to the back).
//
// Fields Palisade does not use are kept as Calico wrote them, so a block
// written back is one Calico's readers see unchanged: the time the
// affinity was claimed, the deprecated hostAffinity (read as the affinity
// when that is unset) and, per attribute, the alternate owner of a live
// migration.
type block struct {
	CIDR                        string            `json:"cidr"`
	Affinity                    *string           `json:"affinity"`
	AffinityClaimTime           json.RawMessage   `json:"affinity_claim_time,omitempty"`
	HostAffinity                *string           `json:"hostAffinity,omitempty"`
	Allocations                 []*int            `json:"allocations"`
	Unallocated                 []int             `json:"unallocated"`
	Attributes                  []attribute       `json:"attributes"`
	SequenceNumber              uint64            `json:"sequenceNumber"`
	SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation"`
	Deleted                     bool              `json:"deleted"`

	prefix netip.Prefix
}

// attribute is who holds an allocation: the handle and free-form
// secondary attributes (namespace, pod, node, timestamp...).
//
// An address released under IPAMConfiguration ipCooldownSeconds is still
// allocated, to an attribute with no handle and no owner that holds only
// the time of its release (ReleasedAt, RFC 3339), as Calico's IPAM keeps
// a cooling address; it becomes free once the cooldown has passed.
// Calico's key for that time was not found in its stored source:
// Palisade writes released_at (the spelling of this struct's handle_id
// and of the block's affinity_claim_time) and reads releasedAt too.
type attribute struct {
	HandleID   *string           `json:"handle_id,omitempty"`
	Secondary  map[string]string `json:"secondary,omitempty"`
	Alternate  map[string]string `json:"alternate,omitempty"`
	ReleasedAt *string           `json:"released_at,omitempty"`
	// ReleasedAtCamel is the other spelling, read and never written.
	ReleasedAtCamel *string `json:"releasedAt,omitempty"`
}

// cooling reports whether the attribute is a released address's, waiting
// out its cooldown.
func (a attribute) cooling() bool { return a.ReleasedAt != nil }

// releasedAt is when a cooling address was released (zero when the time
// cannot be read: such an address is free at once).
func (a attribute) releasedAt() time.Time {
	if a.ReleasedAt == nil {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, *a.ReleasedAt)
	return t
}

// handle returns the attribute's handle ID, "" when none.
func (a attribute) handle() string {
	if a.HandleID == nil {
		return ""
	}
	return *a.HandleID
}

// newBlock returns an empty block for prefix, affine to host ("" for none).
func newBlock(prefix netip.Prefix, host string) *block {
	size := blockSize(prefix)
	b := &block{
		CIDR:                        prefix.String(),
		Allocations:                 make([]*int, size),
		Unallocated:                 make([]int, size),
		Attributes:                  []attribute{},
		SequenceNumberForAllocation: map[string]uint64{},
		prefix:                      prefix,
	}
	for i := range b.Unallocated {
		b.Unallocated[i] = i
	}
	b.setHost(host)
	return b
}

// blockSize is the number of addresses in a block prefix.
func blockSize(p netip.Prefix) int {
	return 1 << (p.Addr().BitLen() - p.Bits())
}

// decodeBlock parses a stored block and checks it is self-consistent.
func decodeBlock(value []byte) (*block, error) {
	var b block
	if err := json.Unmarshal(value, &b); err != nil {
		return nil, fmt.Errorf("decoding block: %w", err)
	}
	p, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, fmt.Errorf("block cidr %q: %w", b.CIDR, err)
	}
	if p != p.Masked() {
		return nil, fmt.Errorf("block cidr %q has host bits set", b.CIDR)
	}
	if hostBits := p.Addr().BitLen() - p.Bits(); hostBits > 16 {
		return nil, fmt.Errorf("block cidr %q: blocks hold at most 65536 addresses", b.CIDR)
	}
	b.prefix = p
	if b.Affinity == nil && b.HostAffinity != nil && *b.HostAffinity != "" {
		// Calico's deprecated form: the node's name alone.
		a := affinityPrefix + *b.HostAffinity
		b.Affinity = &a
	}
	size := blockSize(p)
	if len(b.Allocations) != size {
		return nil, fmt.Errorf("block %s: %d allocations for %d addresses", b.CIDR, len(b.Allocations), size)
	}
	for i, a := range b.Allocations {
		if a != nil && (*a < 0 || *a >= len(b.Attributes)) {
			return nil, fmt.Errorf("block %s: ordinal %d refers to attribute %d of %d", b.CIDR, i, *a, len(b.Attributes))
		}
	}
	for _, o := range b.Unallocated {
		if o < 0 || o >= size {
			return nil, fmt.Errorf("block %s: unallocated ordinal %d out of range", b.CIDR, o)
		}
	}
	if b.SequenceNumberForAllocation == nil {
		b.SequenceNumberForAllocation = map[string]uint64{}
	}
	if b.Attributes == nil {
		b.Attributes = []attribute{}
	}
	for i := range b.Attributes {
		if at := &b.Attributes[i]; at.ReleasedAt == nil && at.ReleasedAtCamel != nil {
			at.ReleasedAt = at.ReleasedAtCamel
		}
		b.Attributes[i].ReleasedAtCamel = nil
	}
	return &b, nil
}

// clone returns a copy of b that can be changed without changing b
// (allocation entries and attributes are replaced, never changed in
// place, so they are shared).
func (b *block) clone() *block {
	c := *b
	c.Allocations = slices.Clone(b.Allocations)
	c.Unallocated = slices.Clone(b.Unallocated)
	c.Attributes = slices.Clone(b.Attributes)
	c.SequenceNumberForAllocation = maps.Clone(b.SequenceNumberForAllocation)
	return &c
}

// encode serialises the block for storage.
func (b *block) encode() ([]byte, error) {
	v, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encoding block %s: %w", b.CIDR, err)
	}
	return v, nil
}

// host returns the node the block is affine to, "" when none.
func (b *block) host() string {
	if b.Affinity == nil {
		return ""
	}
	return strings.TrimPrefix(*b.Affinity, affinityPrefix)
}

// setHost makes the block affine to host, or to no node when host is "".
func (b *block) setHost(host string) {
	b.HostAffinity = nil
	if host == "" {
		b.Affinity, b.AffinityClaimTime = nil, nil
		return
	}
	if b.host() == host && b.Affinity != nil {
		return
	}
	s := affinityPrefix + host
	b.Affinity = &s
	// When the affinity was claimed, as Calico records it (RFC 3339, UTC).
	b.AffinityClaimTime, _ = json.Marshal(time.Now().UTC().Format(time.RFC3339))
}

// ordinal returns the position of addr in the block.
func (b *block) ordinal(addr netip.Addr) (int, bool) {
	if !b.prefix.Contains(addr) {
		return 0, false
	}
	return int(low64(addr) - low64(b.prefix.Addr())), true
}

// addr returns the address at ordinal o.
func (b *block) addr(o int) netip.Addr {
	return addOffset(b.prefix.Addr(), uint64(o))
}

// held counts the addresses that are not free: allocated, or cooling
// down after their release.
func (b *block) held() int {
	return len(b.Allocations) - len(b.Unallocated)
}

// inUse counts allocated addresses (cooling ones are not in use).
func (b *block) inUse() int {
	return b.held() - len(b.cooling())
}

// cooling lists the ordinals of released addresses still cooling down.
func (b *block) cooling() []int {
	var out []int
	for o, idx := range b.Allocations {
		if idx != nil && b.Attributes[*idx].cooling() {
			out = append(out, o)
		}
	}
	return out
}

// empty reports whether no address is held: none allocated and none
// cooling down (a block with cooling addresses is kept, so that they are
// not handed out again before their time through a new block).
func (b *block) empty() bool { return b.held() == 0 }

// reclaim frees the cooling addresses whose cooldown has passed at now,
// queuing them for reuse in the order they were released. It reports
// whether it freed any.
func (b *block) reclaim(now time.Time, cooldown time.Duration) bool {
	type cooled struct {
		o  int
		at time.Time
	}
	var done []cooled
	for o, idx := range b.Allocations {
		if idx == nil {
			continue
		}
		at := b.Attributes[*idx]
		if at.cooling() && !now.Before(at.releasedAt().Add(cooldown)) {
			done = append(done, cooled{o, at.releasedAt()})
		}
	}
	if len(done) == 0 {
		return false
	}
	slices.SortStableFunc(done, func(x, y cooled) int { return x.at.Compare(y.at) })
	for _, c := range done {
		b.Allocations[c.o] = nil
		b.Unallocated = append(b.Unallocated, c.o)
	}
	b.SequenceNumber++
	b.compactAttributes()
	return true
}

// numFree counts free addresses that skip does not exclude.
func (b *block) numFree(skip func(netip.Addr) bool) int {
	if skip == nil {
		return len(b.Unallocated)
	}
	n := 0
	for _, o := range b.Unallocated {
		if !skip(b.addr(o)) {
			n++
		}
	}
	return n
}

// attributeIndex returns the index of an attribute equal to (handle,
// attrs), appending one when none exists.
func (b *block) attributeIndex(handle string, attrs map[string]string) int {
	for i, a := range b.Attributes {
		if !a.cooling() && a.handle() == handle && maps.Equal(a.Secondary, attrs) {
			return i
		}
	}
	a := attribute{}
	if handle != "" {
		h := handle
		a.HandleID = &h
	}
	if len(attrs) > 0 {
		a.Secondary = maps.Clone(attrs)
	}
	b.Attributes = append(b.Attributes, a)
	return len(b.Attributes) - 1
}

// assign allocates up to n free addresses, in Unallocated order, skipping
// those skip excludes, to handle with attrs. It returns the addresses
// allocated (fewer than n when the block runs out).
func (b *block) assign(n int, handle string, attrs map[string]string, skip func(netip.Addr) bool) []netip.Addr {
	if n <= 0 {
		return nil
	}
	var picked []netip.Addr
	var keep []int
	idx := -1
	for i, o := range b.Unallocated {
		if len(picked) == n {
			keep = append(keep, b.Unallocated[i:]...)
			break
		}
		a := b.addr(o)
		if skip != nil && skip(a) {
			keep = append(keep, o)
			continue
		}
		if idx < 0 {
			idx = b.attributeIndex(handle, attrs)
		}
		b.take(o, idx)
		picked = append(picked, a)
	}
	if len(picked) > 0 {
		b.Unallocated = keep
		b.SequenceNumber++
	}
	return picked
}

// take marks ordinal o as allocated to attribute idx (Unallocated is the
// caller's job).
func (b *block) take(o, idx int) {
	v := idx
	b.Allocations[o] = &v
	b.SequenceNumberForAllocation[strconv.Itoa(o)] = b.SequenceNumber
}

// assignAddr allocates one specific address. It fails when the address is
// outside the block or already allocated.
func (b *block) assignAddr(addr netip.Addr, handle string, attrs map[string]string) error {
	o, ok := b.ordinal(addr)
	if !ok {
		return fmt.Errorf("address %s is not in block %s", addr, b.CIDR)
	}
	if b.Allocations[o] != nil {
		if at := b.Attributes[*b.Allocations[o]]; at.cooling() {
			return fmt.Errorf("address %s: %w: released at %s and cooling down (IPAMConfiguration ipCooldownSeconds)", addr, ErrAlreadyAssigned, *at.ReleasedAt)
		}
		return fmt.Errorf("address %s: %w (handle %q)", addr, ErrAlreadyAssigned, b.Attributes[*b.Allocations[o]].handle())
	}
	b.take(o, b.attributeIndex(handle, attrs))
	for i, u := range b.Unallocated {
		if u == o {
			b.Unallocated = append(b.Unallocated[:i], b.Unallocated[i+1:]...)
			break
		}
	}
	b.SequenceNumber++
	return nil
}

// release frees the given addresses of the block. It returns, per handle,
// how many addresses it freed, and the addresses that were not allocated.
func (b *block) release(addrs []netip.Addr) (freed map[string]int, notAllocated []netip.Addr) {
	opts := make([]ReleaseOptions, len(addrs))
	for i, a := range addrs {
		opts[i].Address = a
	}
	return b.releaseIf(opts, time.Time{})
}

// releaseIf frees each address whose allocation still matches its
// options (handle and sequence number, when set). With a cooldown
// (coolFrom set: the time of the release) the address is not free yet
// but cooling down. It returns, per handle, how many addresses it freed,
// and the addresses it left: not allocated (or cooling already), or
// allocated otherwise than the options say.
func (b *block) releaseIf(opts []ReleaseOptions, coolFrom time.Time) (freed map[string]int, notAllocated []netip.Addr) {
	freed = map[string]int{}
	for _, opt := range opts {
		a := opt.Address
		o, ok := b.ordinal(a)
		if !ok || b.Allocations[o] == nil || b.Attributes[*b.Allocations[o]].cooling() || !b.matches(o, opt) {
			notAllocated = append(notAllocated, a)
			continue
		}
		freed[b.Attributes[*b.Allocations[o]].handle()]++
		b.free(o, coolFrom)
	}
	if len(opts) > len(notAllocated) {
		b.SequenceNumber++
		b.compactAttributes()
	}
	return freed, notAllocated
}

// matches reports whether the allocation at ordinal o is the one opt
// names: held by opt.Handle and made at opt.SequenceNumber, when set.
func (b *block) matches(o int, opt ReleaseOptions) bool {
	if opt.Handle != "" && b.Attributes[*b.Allocations[o]].handle() != opt.Handle {
		return false
	}
	return opt.SequenceNumber == nil || b.sequenceNumberOf(o) == *opt.SequenceNumber
}

// sequenceNumberOf is the block's sequence number when ordinal o was
// allocated, as Calico records it (0 when not recorded).
func (b *block) sequenceNumberOf(o int) uint64 {
	return b.SequenceNumberForAllocation[strconv.Itoa(o)]
}

// releaseHandle frees every address held by handle (cooling down from
// coolFrom, when set) and returns how many.
func (b *block) releaseHandle(handle string, coolFrom time.Time) int {
	n := 0
	for o, idx := range b.Allocations {
		if idx != nil && !b.Attributes[*idx].cooling() && b.Attributes[*idx].handle() == handle {
			b.free(o, coolFrom)
			n++
		}
	}
	if n > 0 {
		b.SequenceNumber++
		b.compactAttributes()
	}
	return n
}

// free marks ordinal o free and queues it last for reuse; with coolFrom
// set, it leaves it allocated to a cooling attribute released then
// instead (reclaim frees it later).
func (b *block) free(o int, coolFrom time.Time) {
	delete(b.SequenceNumberForAllocation, strconv.Itoa(o))
	if coolFrom.IsZero() {
		b.Allocations[o] = nil
		b.Unallocated = append(b.Unallocated, o)
		return
	}
	at := coolFrom.UTC().Format(time.RFC3339)
	idx := slices.IndexFunc(b.Attributes, func(a attribute) bool {
		return a.ReleasedAt != nil && *a.ReleasedAt == at && a.HandleID == nil && len(a.Secondary) == 0
	})
	if idx < 0 {
		b.Attributes = append(b.Attributes, attribute{ReleasedAt: &at})
		idx = len(b.Attributes) - 1
	}
	b.Allocations[o] = &idx
}

// compactAttributes drops attributes no allocation refers to and
// renumbers the rest, keeping their order.
func (b *block) compactAttributes() {
	used := make([]bool, len(b.Attributes))
	for _, idx := range b.Allocations {
		if idx != nil {
			used[*idx] = true
		}
	}
	remap := make([]int, len(b.Attributes))
	kept := b.Attributes[:0:0]
	for i, a := range b.Attributes {
		if used[i] {
			remap[i] = len(kept)
			kept = append(kept, a)
		}
	}
	for o, idx := range b.Allocations {
		if idx != nil {
			v := remap[*idx]
			b.Allocations[o] = &v
		}
	}
	b.Attributes = kept
}

// handleCounts returns how many addresses each handle holds in the block
// (cooling addresses are held by none).
func (b *block) handleCounts() map[string]int {
	out := map[string]int{}
	for _, idx := range b.Allocations {
		if idx != nil && !b.Attributes[*idx].cooling() {
			out[b.Attributes[*idx].handle()]++
		}
	}
	return out
}

// allocations lists the allocated addresses with their holders, in
// ordinal order.
func (b *block) allocations() []Allocation {
	var out []Allocation
	for o, idx := range b.Allocations {
		if idx == nil || b.Attributes[*idx].cooling() {
			continue
		}
		a := b.Attributes[*idx]
		out = append(out, Allocation{
			IP:             b.addr(o),
			HandleID:       a.handle(),
			Attrs:          maps.Clone(a.Secondary),
			SequenceNumber: b.sequenceNumberOf(o),
		})
	}
	return out
}

// low64 returns the low 64 bits of an address (all of an IPv4 one).
func low64(a netip.Addr) uint64 {
	if a.Is4() {
		b := a.As4()
		return uint64(binary.BigEndian.Uint32(b[:]))
	}
	b := a.As16()
	return binary.BigEndian.Uint64(b[8:])
}

// addOffset returns base+off (IPv4 offsets must stay within 32 bits).
func addOffset(base netip.Addr, off uint64) netip.Addr {
	if base.Is4() {
		b := base.As4()
		binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])+uint32(off))
		return netip.AddrFrom4(b)
	}
	b := base.As16()
	lo := binary.BigEndian.Uint64(b[8:])
	sum := lo + off
	binary.BigEndian.PutUint64(b[8:], sum)
	if sum < lo {
		binary.BigEndian.PutUint64(b[:8], binary.BigEndian.Uint64(b[:8])+1)
	}
	return netip.AddrFrom16(b)
}
