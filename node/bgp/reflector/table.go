package reflector

import (
	"bytes"
	"net"
	"net/netip"
	"slices"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// update is one parsed UPDATE, split into what it withdraws and what it
// announces, with the attributes its announcements share.
type update struct {
	family    bgp.RouteFamily
	withdrawn []netip.Prefix
	announced []netip.Prefix
	// attrs are the path attributes but MP_REACH_NLRI and MP_UNREACH_NLRI;
	// nexthop and linkLocal the MP_REACH_NLRI next hops (IPv6).
	attrs     []bgp.PathAttributeInterface
	nexthop   net.IP
	linkLocal net.IP
	// eor is set for an End-of-RIB marker.
	eor bool
}

// parseUpdate splits an UPDATE. mixed is true when it carries more than
// one family (never from GoBGP or the speakers Palisade peers with; such
// a message is re-encoded per family).
func parseUpdate(u *bgp.BGPUpdate) (ups []update) {
	if eor, f := u.IsEndOfRib(); eor {
		return []update{{family: f, eor: true}}
	}
	byFam := map[bgp.RouteFamily]*update{}
	get := func(f bgp.RouteFamily) *update {
		if x, ok := byFam[f]; ok {
			return x
		}
		x := &update{family: f}
		byFam[f] = x
		return x
	}
	var attrs []bgp.PathAttributeInterface
	for _, a := range u.PathAttributes {
		switch a := a.(type) {
		case *bgp.PathAttributeMpReachNLRI:
			x := get(bgp.AfiSafiToRouteFamily(a.AFI, a.SAFI))
			x.nexthop, x.linkLocal = a.Nexthop, a.LinkLocalNexthop
			for _, p := range a.Value {
				if q, ok := toPrefix(p); ok {
					x.announced = append(x.announced, q)
				}
			}
		case *bgp.PathAttributeMpUnreachNLRI:
			x := get(bgp.AfiSafiToRouteFamily(a.AFI, a.SAFI))
			for _, p := range a.Value {
				if q, ok := toPrefix(p); ok {
					x.withdrawn = append(x.withdrawn, q)
				}
			}
		default:
			attrs = append(attrs, a)
		}
	}
	if len(u.NLRI)+len(u.WithdrawnRoutes) > 0 {
		x := get(bgp.RF_IPv4_UC)
		for _, p := range u.WithdrawnRoutes {
			if q, ok := toPrefix(p); ok {
				x.withdrawn = append(x.withdrawn, q)
			}
		}
		for _, p := range u.NLRI {
			if q, ok := toPrefix(p); ok {
				x.announced = append(x.announced, q)
			}
		}
	}
	for _, f := range families {
		if x, ok := byFam[f]; ok {
			if len(x.announced) > 0 {
				x.attrs = attrs
			}
			ups = append(ups, *x)
		}
	}
	return ups
}

func toPrefix(p bgp.AddrPrefixInterface) (netip.Prefix, bool) {
	switch q := p.(type) {
	case *bgp.IPAddrPrefix:
		a, ok := netip.AddrFromSlice(q.Prefix.To4())
		return netip.PrefixFrom(a, int(q.Length)), ok
	case *bgp.IPv6AddrPrefix:
		a, ok := netip.AddrFromSlice(q.Prefix.To16())
		return netip.PrefixFrom(a, int(q.Length)), ok
	}
	return netip.Prefix{}, false
}

func fromPrefix(p netip.Prefix, id uint32) bgp.AddrPrefixInterface {
	var out bgp.AddrPrefixInterface
	if p.Addr().Is4() {
		out = bgp.NewIPAddrPrefix(uint8(p.Bits()), p.Addr().String())
	} else {
		out = bgp.NewIPv6AddrPrefix(uint8(p.Bits()), p.Addr().String())
	}
	if id != 0 {
		out.SetPathLocalIdentifier(id)
	}
	return out
}

// maxNLRI bounds the prefixes of one encoded UPDATE so that it stays
// within the 4,096 bytes of a BGP message whatever the attributes.
const maxNLRI = 150

// encode writes the withdrawals and announcements of one family as
// UPDATEs; id, when not zero, is the ADD-PATH path identifier of every
// prefix.
func encode(family bgp.RouteFamily, withdrawn []netip.Prefix, attrs []bgp.PathAttributeInterface, nexthop, linkLocal net.IP,
	announced []netip.Prefix, id uint32) [][]byte {
	var opts []*bgp.MarshallingOption
	if id != 0 {
		opts = []*bgp.MarshallingOption{{AddPath: map[bgp.RouteFamily]bgp.BGPAddPathMode{family: bgp.BGP_ADD_PATH_SEND}}}
	}
	var out [][]byte
	for len(withdrawn) > 0 {
		n := min(len(withdrawn), maxNLRI)
		chunk := withdrawn[:n]
		withdrawn = withdrawn[n:]
		if family == bgp.RF_IPv4_UC {
			var ws []*bgp.IPAddrPrefix
			for _, p := range chunk {
				ws = append(ws, fromPrefix(p, id).(*bgp.IPAddrPrefix))
			}
			out = append(out, serialize(bgp.NewBGPUpdateMessage(ws, nil, nil), opts...))
			continue
		}
		var ws []bgp.AddrPrefixInterface
		for _, p := range chunk {
			ws = append(ws, fromPrefix(p, id))
		}
		out = append(out, serialize(bgp.NewBGPUpdateMessage(nil, []bgp.PathAttributeInterface{bgp.NewPathAttributeMpUnreachNLRI(ws)}, nil), opts...))
	}
	for len(announced) > 0 {
		n := min(len(announced), maxNLRI)
		chunk := announced[:n]
		announced = announced[n:]
		if family == bgp.RF_IPv4_UC {
			var ns []*bgp.IPAddrPrefix
			for _, p := range chunk {
				ns = append(ns, fromPrefix(p, id).(*bgp.IPAddrPrefix))
			}
			out = append(out, serialize(bgp.NewBGPUpdateMessage(nil, attrs, ns), opts...))
			continue
		}
		var ns []bgp.AddrPrefixInterface
		for _, p := range chunk {
			ns = append(ns, fromPrefix(p, id))
		}
		mp := bgp.NewPathAttributeMpReachNLRI(nexthop.String(), ns)
		if linkLocal != nil {
			mp.LinkLocalNexthop = linkLocal
		}
		pattrs := append([]bgp.PathAttributeInterface{mp}, attrs...)
		out = append(out, serialize(bgp.NewBGPUpdateMessage(nil, pattrs, nil), opts...))
	}
	return out
}

// originator is the ORIGINATOR_ID of attrs, invalid when absent.
func originator(attrs []bgp.PathAttributeInterface) netip.Addr {
	for _, a := range attrs {
		if o, ok := a.(*bgp.PathAttributeOriginatorId); ok {
			ip, _ := netip.AddrFromSlice(o.Value.To4())
			return ip
		}
	}
	return netip.Addr{}
}

// communities reports whether attrs carry the LLGR_STALE and NO_LLGR
// communities.
func communities(attrs []bgp.PathAttributeInterface) (llgrStale, noLLGR bool) {
	for _, a := range attrs {
		if c, ok := a.(*bgp.PathAttributeCommunities); ok {
			llgrStale = slices.Contains(c.Value, uint32(bgp.COMMUNITY_LLGR_STALE))
			noLLGR = slices.Contains(c.Value, uint32(bgp.COMMUNITY_NO_LLGR))
		}
	}
	return llgrStale, noLLGR
}

// signature is the encoding of attributes and next hops, to compare two
// announcements.
func signature(attrs []bgp.PathAttributeInterface, nexthop, linkLocal net.IP) []byte {
	var b bytes.Buffer
	for _, a := range attrs {
		if s, err := a.Serialize(); err == nil {
			b.Write(s)
		}
	}
	b.Write(nexthop)
	b.Write(linkLocal)
	return b.Bytes()
}

// group is the prefixes of one announcement from the speaker that are
// still current: they share attributes and origin, and are encoded
// together (once) for the clients that join later.
type group struct {
	family             bgp.RouteFamily
	attrs              []bgp.PathAttributeInterface
	nexthop, linkLocal net.IP
	sig                []byte
	origin             netip.Addr
	llgr               bool
	// prefixes are the group's current prefixes (usually one: a client's
	// block).
	prefixes []netip.Prefix
	// enc caches the encoding of prefixes; nil after a change.
	enc [][]byte
}

func (g *group) remove(p netip.Prefix) {
	if i := slices.Index(g.prefixes, p); i >= 0 {
		g.prefixes = slices.Delete(g.prefixes, i, i+1)
	}
	g.enc = nil
}

func (g *group) encoded() [][]byte {
	if g.enc == nil && len(g.prefixes) > 0 {
		g.enc = encode(g.family, nil, g.attrs, g.nexthop, g.linkLocal, g.prefixes, 0)
	}
	return g.enc
}

// logEntry is one message for the clients, kept until every client has
// been sent it.
type logEntry struct {
	family bgp.RouteFamily
	msgs   [][]byte
	// origin is the client (BGP identifier) whose route this is: it gets
	// forOrigin instead.
	origin    netip.Addr
	forOrigin [][]byte
	// llgr entries carry LLGR_STALE routes: a client that did not
	// negotiate long-lived graceful restart gets noLLGR instead.
	llgr   bool
	noLLGR [][]byte
	// eor is an End-of-RIB of the speaker's table: it releases the
	// clients' own End-of-RIB, sent to none as it is.
	eor bool
}

// pick is what a client with BGP identifier id, long-lived graceful
// restart or not, is sent of e.
func (e *logEntry) pick(id netip.Addr, llgr bool) [][]byte {
	switch {
	case e.eor:
		return nil
	case e.origin.IsValid() && e.origin == id:
		return e.forOrigin
	case e.llgr && !llgr:
		return e.noLLGR
	}
	return e.msgs
}

// table is what the speaker sends a route-reflector client, as the
// speaker's downstream session receives it: the current routes, and the
// log of changes not yet sent to every client.
type table struct {
	routes map[netip.Prefix]*group
	// gen counts the speaker's sessions; seen[p] is the session that last
	// announced p, so that routes a new session did not announce again
	// are withdrawn at its End-of-RIB.
	gen  int
	seen map[netip.Prefix]int
	eor  map[bgp.RouteFamily]bool
	log  []logEntry
	base int64 // sequence number of log[0]
}

func newTable() *table {
	return &table{routes: map[netip.Prefix]*group{}, seen: map[netip.Prefix]int{}, eor: map[bgp.RouteFamily]bool{}}
}

// end is the sequence number after the last entry.
func (t *table) end() int64 { return t.base + int64(len(t.log)) }

// apply records one UPDATE of the speaker's and logs what the clients
// are to be sent: raw is the message as received, which every client but
// the route's origin is sent unchanged when it carries one family.
func (t *table) apply(u update, raw []byte, single bool) {
	if u.eor {
		t.eor[u.family] = true
		var gone []netip.Prefix
		for p, g := range t.routes {
			if g.family == u.family && t.seen[p] < t.gen {
				gone = append(gone, p)
			}
		}
		if len(gone) > 0 {
			t.apply(update{family: u.family, withdrawn: gone}, nil, false)
		}
		t.log = append(t.log, logEntry{family: u.family, eor: true})
		return
	}
	var g *group
	var origin netip.Addr
	llgr := false
	if len(u.announced) > 0 {
		sig := signature(u.attrs, u.nexthop, u.linkLocal)
		// The speaker sends its routes again after a policy change; what
		// is already current is not sent again.
		same := len(u.withdrawn) == 0
		for _, p := range u.announced {
			old := t.routes[p]
			same = same && old != nil && bytes.Equal(old.sig, sig)
		}
		if same {
			for _, p := range u.announced {
				t.seen[p] = t.gen
			}
			return
		}
		origin = originator(u.attrs)
		llgr, _ = communities(u.attrs)
		g = &group{family: u.family, attrs: u.attrs, nexthop: u.nexthop, linkLocal: u.linkLocal, sig: sig,
			origin: origin, llgr: llgr, prefixes: make([]netip.Prefix, 0, len(u.announced))}
	}
	// What the origin loses: the withdrawn prefixes, and those it had
	// from another origin before this announcement of its own.
	lose := slices.Clone(u.withdrawn)
	for _, p := range u.withdrawn {
		if old := t.routes[p]; old != nil {
			old.remove(p)
			delete(t.routes, p)
			delete(t.seen, p)
		}
	}
	for _, p := range u.announced {
		if old := t.routes[p]; old != nil {
			old.remove(p)
			if old.origin != origin {
				lose = append(lose, p)
			}
		}
		t.routes[p] = g
		t.seen[p] = t.gen
		g.prefixes = append(g.prefixes, p)
	}
	e := logEntry{family: u.family, origin: origin, llgr: llgr}
	if single && raw != nil {
		e.msgs = [][]byte{raw}
	} else {
		e.msgs = encode(u.family, u.withdrawn, u.attrs, u.nexthop, u.linkLocal, u.announced, 0)
	}
	if origin.IsValid() && len(lose) > 0 {
		e.forOrigin = encode(u.family, lose, nil, nil, nil, nil, 0)
	}
	if llgr {
		e.noLLGR = encode(u.family, append(slices.Clone(u.withdrawn), u.announced...), nil, nil, nil, nil, 0)
	}
	t.log = append(t.log, e)
}

// dump is the table as a client joining now is sent it: every current
// route of its families but its own (and, without long-lived graceful
// restart, the LLGR_STALE ones).
func (t *table) dump(fams map[bgp.RouteFamily]bool, id netip.Addr, llgr bool) [][]byte {
	seen := map[*group]bool{}
	var out [][]byte
	for _, g := range t.routes {
		if seen[g] {
			continue
		}
		seen[g] = true
		if !fams[g.family] || (g.origin.IsValid() && g.origin == id) || (g.llgr && !llgr) {
			continue
		}
		out = append(out, g.encoded()...)
	}
	return out
}

// trim drops the entries every client has been sent (upto is the lowest
// cursor).
func (t *table) trim(upto int64) {
	n := int(upto - t.base)
	if n <= 0 {
		return
	}
	n = min(n, len(t.log))
	clear(t.log[:n])
	t.log = t.log[n:]
	t.base += int64(n)
	if cap(t.log) > 4096 && len(t.log) < cap(t.log)/4 {
		t.log = slices.Clone(t.log)
	}
}
