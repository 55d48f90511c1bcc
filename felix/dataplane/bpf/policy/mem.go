package policy

import (
	"fmt"
)

// Mem is the engine's memory, pal_pol's words (c/engine.h): felix writes
// them through the map's mapping while the programs read them, so every
// store is of one whole word (or one aligned half) at a time, and a
// structure is written before what points at it.
type Mem interface {
	// Words is the size in 64-bit words.
	Words() uint32
	Load(i uint32) uint64
	Store(i uint32, v uint64)
	// Load32 and Store32 address 32-bit halves: i/2 is the word, i%2
	// the half (the low one first).
	Load32(i uint32) uint32
	Store32(i uint32, v uint32)
}

// SliceMem is Mem in a slice (tests, and the reference interpreter).
type SliceMem []uint64

func (m SliceMem) Words() uint32            { return uint32(len(m)) }
func (m SliceMem) Load(i uint32) uint64     { return m[i] }
func (m SliceMem) Store(i uint32, v uint64) { m[i] = v }
func (m SliceMem) Load32(i uint32) uint32   { return uint32(m[i/2] >> (32 * (i % 2))) }
func (m SliceMem) Store32(i uint32, v uint32) {
	sh := 32 * (i % 2)
	m[i/2] = m[i/2]&^(0xffffffff<<sh) | uint64(v)<<sh
}

// The fixed layout of the memory (PE_*), in words.
const (
	// memZero: words [0, memZero) stay zero; an empty record or
	// sub-record is offset 0.
	memZero = 2048
	// memHeader: the generation of the felix that writes (the magic
	// above it).
	memHeader = memZero
	memMagic  = 0x50414c50_4f4c0000 // "PALPOL"
	// memSlots: a u32 per pal_progs slot, the stage header it runs.
	memSlots = 4096
	slotMax  = 65536
	// memTags: a u16 per page, the generation owning it (0: free).
	memTags   = memSlots + slotMax/2
	pageWords = 512
)

// Words is pal_pol's size (POL_WORDS).
const Words = 1 << 21

func fixedPages(words uint32) uint32 {
	pages := words / pageWords
	end := memTags + (pages+3)/4
	return (end + pageWords - 1) / pageWords
}

// pages allocates runs of whole pages, each tagged with the generation
// that owns it.
type pages struct {
	mem   Mem
	gen   uint16
	owner []uint16 // by page: 0 free, else the generation
	first uint32
}

// newPages reads the tags: pages of another generation stay in use until
// dropForeign.
func newPages(mem Mem, gen uint16) *pages {
	n := mem.Words() / pageWords
	p := &pages{mem: mem, gen: gen, owner: make([]uint16, n), first: fixedPages(mem.Words())}
	for i := p.first; i < n; i++ {
		p.owner[i] = p.tag(i)
	}
	return p
}

func (p *pages) tag(page uint32) uint16 {
	v := p.mem.Load32(2*memTags + page/2)
	return uint16(v >> (16 * (page % 2)))
}

func (p *pages) setTag(page uint32, g uint16) {
	i := 2*memTags + page/2
	v := p.mem.Load32(i)
	sh := 16 * (page % 2)
	p.mem.Store32(i, v&^(0xffff<<sh)|uint32(g)<<sh)
	p.owner[page] = g
}

// run is n pages from first.
type run struct{ first, n uint32 }

func (r run) words() uint32 { return r.n * pageWords }
func (r run) start() uint32 { return r.first * pageWords }

// alloc takes n contiguous free pages, zeroed.
func (p *pages) alloc(n uint32) (run, error) {
	free := uint32(0)
	for i := p.first; i < uint32(len(p.owner)); i++ {
		if p.owner[i] != 0 {
			free = 0
			continue
		}
		free++
		if free == n {
			r := run{i + 1 - n, n}
			for j := r.first; j < r.first+n; j++ {
				p.setTag(j, p.gen)
			}
			for w := r.start(); w < r.start()+r.words(); w++ {
				p.mem.Store(w, 0)
			}
			return r, nil
		}
	}
	return run{}, fmt.Errorf("no %d free pages of %d: %w", n, len(p.owner), ErrEngineFull)
}

func (p *pages) free(r run) {
	for j := r.first; j < r.first+r.n; j++ {
		p.setTag(j, 0)
	}
}

// foreign frees every page another generation owns.
func (p *pages) freeForeign() {
	for i := p.first; i < uint32(len(p.owner)); i++ {
		if p.owner[i] != 0 && p.owner[i] != p.gen {
			p.setTag(i, 0)
		}
	}
}

// Generations reads the memory's header and page tags: the generation
// of the felix that writes it, and the pages each generation owns.
func Generations(mem Mem) (current uint16, pages map[uint16]int) {
	if h := mem.Load(memHeader); h&^0xffff == memMagic {
		current = uint16(h)
	}
	p := newPages(mem, 0)
	pages = map[uint16]int{}
	for i := p.first; i < uint32(len(p.owner)); i++ {
		if p.owner[i] != 0 {
			pages[p.owner[i]]++
		}
	}
	return current, pages
}

// used is how many pages are in use.
func (p *pages) used() int {
	n := 0
	for i := p.first; i < uint32(len(p.owner)); i++ {
		if p.owner[i] != 0 {
			n++
		}
	}
	return n
}

// arena hands out words from runs of pages (a stage's data, or the
// IPv4 table's groups); it frees them all at once.
type arena struct {
	p    *pages
	runs []run
	next uint32 // next free word of the last run
	end  uint32
}

func (a *arena) alloc(words uint32) (uint32, error) {
	if words == 0 {
		return 0, nil
	}
	if a.end-a.next < words {
		n := max((words+pageWords-1)/pageWords, uint32(len(a.runs)+1))
		r, err := a.p.alloc(n)
		if err != nil {
			return 0, err
		}
		a.runs = append(a.runs, r)
		a.next, a.end = r.start(), r.start()+r.words()
	}
	at := a.next
	a.next += words
	return at, nil
}

func (a *arena) words() uint32 {
	n := uint32(0)
	for _, r := range a.runs {
		n += r.words()
	}
	return n
}
