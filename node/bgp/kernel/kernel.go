// Package kernel programs BGP-learned routes (and the local blackholes of a
// node's blocks) into the kernel's main routing table under one dedicated
// route protocol number, over a raw rtnetlink socket with batched writes.
//
// It only ever reads, replaces or deletes routes of its own protocol: routes
// of other protocols (felix's /32 routes to cali* workload devices, the
// connected routes, an operator's static routes) are never touched, and a
// route it wants whose slot another protocol holds is skipped and reported.
package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// DefaultProtocol is the route protocol number Palisade's BGP routes carry
// (`ip route show proto 201`). No routing daemon uses it: not BIRD (12),
// FRR (11 for zebra, 186–197 for its daemons in FRR 8, 196 being its
// static routes), nor Calico's felix (3 and 80), and iproute2 names no
// protocol 201, so routes of another daemon on the same host are never
// mistaken for ours. Routes are matched by this number, never by a name.
const DefaultProtocol = 201

// mainTable is RT_TABLE_MAIN.
const mainTable = unix.RT_TABLE_MAIN

// Route is one route of our protocol in the main table: either a blackhole
// or a gateway route over one or several (ECMP) next hops.
type Route struct {
	Dst       netip.Prefix
	Blackhole bool
	// NextHops are sorted and unique.
	NextHops []netip.Addr
}

// Equal reports whether two routes are the same.
func (r Route) Equal(o Route) bool {
	return r.Dst == o.Dst && r.Blackhole == o.Blackhole && slices.Equal(r.NextHops, o.NextHops)
}

// Normalize sorts and deduplicates the next hops and masks the prefix.
func (r Route) Normalize() Route {
	r.Dst = r.Dst.Masked()
	hops := slices.Clone(r.NextHops)
	slices.SortFunc(hops, func(a, b netip.Addr) int { return a.Compare(b) })
	r.NextHops = slices.Compact(hops)
	return r
}

// Handle is a route socket bound to the network namespace it was opened in.
// It is safe for concurrent use (calls are serialised).
type Handle struct {
	mu    sync.Mutex
	fd    int
	proto uint8
	seq   uint32
	buf   []byte
	rbuf  []byte
	// hops is parse's scratch space for next hops.
	hops []netip.Addr
}

// Open opens a route socket in the calling thread's network namespace for
// routes of protocol proto (DefaultProtocol when 0).
func Open(proto uint8) (*Handle, error) {
	if proto == 0 {
		proto = DefaultProtocol
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding rtnetlink socket: %w", err)
	}
	// Acks carry only the header of the request, not the whole request;
	// dumps are filtered in the kernel by table and protocol.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	return &Handle{fd: fd, proto: proto, rbuf: make([]byte, 1<<20)}, nil
}

// Protocol is the route protocol this handle manages.
func (h *Handle) Protocol() uint8 { return h.proto }

// Close closes the socket.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fd < 0 {
		return nil
	}
	err := unix.Close(h.fd)
	h.fd = -1
	return err
}

// List reads back every route of our protocol in the main table, IPv4 and
// IPv6.
func (h *Handle) List() (map[netip.Prefix]Route, error) {
	out := map[netip.Prefix]Route{}
	err := h.Walk(func(r Route) {
		r.NextHops = slices.Clone(r.NextHops)
		out[r.Dst] = r
	})
	return out, err
}

// Walk calls fn with every route of our protocol in the main table, IPv4
// then IPv6, as the kernel's dump is read: nothing is collected first. The
// route's NextHops (sorted and unique) are only valid during the call; fn
// must copy them to keep them, and must not call the handle.
func (h *Handle) Walk(fn func(Route)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		if err := h.dump(fam, fn); err != nil {
			return err
		}
	}
	return nil
}

// dump walks one family.
func (h *Handle) dump(fam uint8, fn func(Route)) error {
	h.seq++
	seq := h.seq
	msg := make([]byte, unix.SizeofNlMsghdr+unix.SizeofRtMsg)
	putHdr(msg, len(msg), unix.RTM_GETROUTE, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, seq)
	rt := msg[unix.SizeofNlMsghdr:]
	rt[0] = fam
	rt[4] = mainTable
	rt[5] = h.proto
	if err := unix.Sendto(h.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("dumping routes: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(h.fd, h.rbuf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("reading route dump: %w", err)
		}
		b := h.rbuf[:n]
		for len(b) >= unix.SizeofNlMsghdr {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			typ := binary.NativeEndian.Uint16(b[4:6])
			mseq := binary.NativeEndian.Uint32(b[8:12])
			if l < unix.SizeofNlMsghdr || l > len(b) {
				return fmt.Errorf("reading route dump: malformed message")
			}
			m := b[:l]
			b = b[align(l):]
			if mseq != seq {
				continue
			}
			switch typ {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if e := errno(m); e != nil {
					return fmt.Errorf("dumping routes: %w", e)
				}
				return nil
			case unix.RTM_NEWROUTE:
				if r, ok := h.parse(m[unix.SizeofNlMsghdr:]); ok {
					fn(r)
				}
			}
		}
	}
}

// parse decodes a route message; ok is false for routes not ours. The next
// hops are decoded into the handle's scratch slice (no allocation).
func (h *Handle) parse(m []byte) (Route, bool) {
	if len(m) < unix.SizeofRtMsg {
		return Route{}, false
	}
	fam, dstLen, table, proto, typ := m[0], int(m[1]), uint32(m[4]), m[5], m[7]
	if proto != h.proto {
		return Route{}, false
	}
	var r Route
	r.Blackhole = typ == unix.RTN_BLACKHOLE
	hops := h.hops[:0]
	var dst []byte
	attrs := m[unix.SizeofRtMsg:]
	for len(attrs) >= 4 {
		al := int(binary.NativeEndian.Uint16(attrs[0:2]))
		at := binary.NativeEndian.Uint16(attrs[2:4])
		if al < 4 || al > len(attrs) {
			break
		}
		v := attrs[4:al]
		switch at {
		case unix.RTA_TABLE:
			if len(v) >= 4 {
				table = binary.NativeEndian.Uint32(v)
			}
		case unix.RTA_DST:
			dst = v
		case unix.RTA_GATEWAY:
			if a, ok := netip.AddrFromSlice(v); ok {
				hops = append(hops, a)
			}
		case unix.RTA_MULTIPATH:
			for len(v) >= 8 {
				nl := int(binary.NativeEndian.Uint16(v[0:2]))
				if nl < 8 || nl > len(v) {
					break
				}
				na := v[8:nl]
				for len(na) >= 4 {
					l := int(binary.NativeEndian.Uint16(na[0:2]))
					if l < 4 || l > len(na) {
						break
					}
					if binary.NativeEndian.Uint16(na[2:4]) == unix.RTA_GATEWAY {
						if a, ok := netip.AddrFromSlice(na[4:l]); ok {
							hops = append(hops, a)
						}
					}
					na = na[align(l):]
				}
				v = v[align(nl):]
			}
		}
		attrs = attrs[align(al):]
	}
	h.hops = hops
	if table != mainTable {
		return Route{}, false
	}
	var addr netip.Addr
	if dst == nil {
		if fam == unix.AF_INET {
			addr = netip.IPv4Unspecified()
		} else {
			addr = netip.IPv6Unspecified()
		}
	} else {
		var ok bool
		if addr, ok = netip.AddrFromSlice(dst); !ok {
			return Route{}, false
		}
	}
	r.Dst = netip.PrefixFrom(addr, dstLen)
	if len(hops) > 1 {
		slices.SortFunc(hops, func(a, b netip.Addr) int { return a.Compare(b) })
		hops = slices.Compact(hops)
	}
	if len(hops) > 0 {
		r.NextHops = hops
	}
	return r, true
}

// Op is one change to apply.
type Op struct {
	Route Route
	// Delete removes the route; Replace overwrites a route of ours with the
	// same destination; neither creates a route only if the slot is free.
	Delete, Replace bool
}

// OpError is a change the kernel refused.
type OpError struct {
	Op  Op
	Err error
}

func (e OpError) Error() string {
	what := "adding"
	switch {
	case e.Op.Delete:
		what = "deleting"
	case e.Op.Replace:
		what = "replacing"
	}
	return fmt.Sprintf("%s route %s: %v", what, e.Op.Route.Dst, e.Err)
}

// batchSize is how many requests go in one sendmsg; their acks (36 bytes
// each with NETLINK_CAP_ACK) fit the receive buffer easily.
const batchSize = 2048

// Apply sends ops to the kernel in batches and returns the ones it
// refused. An add refused with EEXIST (another protocol's route in that
// slot) or a delete of a route already gone is reported too, so the caller
// can tell; neither stops the batch.
func (h *Handle) Apply(ops []Op) []OpError {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.applyLocked(ops)
}

// applyLocked is Apply with the handle's lock held.
func (h *Handle) applyLocked(ops []Op) []OpError {
	var errs []OpError
	for len(ops) > 0 {
		n := min(len(ops), batchSize)
		errs = append(errs, h.applyBatch(ops[:n])...)
		ops = ops[n:]
	}
	return errs
}

func (h *Handle) applyBatch(ops []Op) []OpError {
	h.buf = h.buf[:0]
	first := h.seq + 1
	for i := range ops {
		h.seq++
		h.buf = h.appendRoute(h.buf, ops[i], h.seq)
	}
	var errs []OpError
	if err := unix.Sendto(h.fd, h.buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		for _, op := range ops {
			errs = append(errs, OpError{op, err})
		}
		return errs
	}
	pending := len(ops)
	for pending > 0 {
		n, _, err := unix.Recvfrom(h.fd, h.rbuf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			errs = append(errs, OpError{Op{}, fmt.Errorf("reading acks: %w", err)})
			return errs
		}
		b := h.rbuf[:n]
		for len(b) >= unix.SizeofNlMsghdr {
			l := int(binary.NativeEndian.Uint32(b[0:4]))
			if l < unix.SizeofNlMsghdr || l > len(b) {
				break
			}
			m := b[:l]
			b = b[align(l):]
			if binary.NativeEndian.Uint16(m[4:6]) != unix.NLMSG_ERROR || len(m) < unix.SizeofNlMsghdr+4+unix.SizeofNlMsghdr {
				continue
			}
			// The ack echoes the request's sequence number.
			seq := binary.NativeEndian.Uint32(m[unix.SizeofNlMsghdr+4+8:])
			if seq < first || seq >= first+uint32(len(ops)) {
				continue
			}
			pending--
			if e := errno(m); e != nil {
				errs = append(errs, OpError{ops[seq-first], e})
			}
		}
	}
	return errs
}

// appendRoute encodes one request.
func (h *Handle) appendRoute(b []byte, op Op, seq uint32) []byte {
	start := len(b)
	b = append(b, make([]byte, unix.SizeofNlMsghdr+unix.SizeofRtMsg)...)
	r := op.Route
	fam := uint8(unix.AF_INET6)
	if r.Dst.Addr().Is4() {
		fam = unix.AF_INET
	}
	rt := b[start+unix.SizeofNlMsghdr:]
	rt[0] = fam
	rt[1] = uint8(r.Dst.Bits())
	rt[4] = mainTable
	rt[5] = h.proto
	rt[6] = unix.RT_SCOPE_UNIVERSE
	msgType := uint16(unix.RTM_NEWROUTE)
	flags := uint16(unix.NLM_F_REQUEST | unix.NLM_F_ACK)
	switch {
	case op.Delete:
		msgType = unix.RTM_DELROUTE
		rt[6] = unix.RT_SCOPE_NOWHERE
	case op.Replace:
		flags |= unix.NLM_F_CREATE | unix.NLM_F_REPLACE
	default:
		flags |= unix.NLM_F_CREATE | unix.NLM_F_EXCL
	}
	if !op.Delete {
		rt[7] = unix.RTN_UNICAST
		if r.Blackhole {
			rt[7] = unix.RTN_BLACKHOLE
		}
	}
	b = appendAttr(b, unix.RTA_DST, r.Dst.Addr().AsSlice())
	if !op.Delete && !r.Blackhole {
		if len(r.NextHops) == 1 {
			b = appendAttr(b, unix.RTA_GATEWAY, r.NextHops[0].AsSlice())
		} else if len(r.NextHops) > 1 {
			var mp []byte
			for _, nh := range r.NextHops {
				gw := nh.AsSlice()
				l := 8 + 4 + len(gw)
				rtnh := make([]byte, 8)
				binary.NativeEndian.PutUint16(rtnh[0:2], uint16(l))
				mp = append(mp, rtnh...)
				mp = appendAttr(mp, unix.RTA_GATEWAY, gw)
			}
			b = appendAttr(b, unix.RTA_MULTIPATH, mp)
		}
	}
	putHdr(b[start:], len(b)-start, msgType, flags, seq)
	return b
}

// appendAttr appends one rtattr, padded.
func appendAttr(b []byte, typ uint16, v []byte) []byte {
	l := 4 + len(v)
	var hdr [4]byte
	binary.NativeEndian.PutUint16(hdr[0:2], uint16(l))
	binary.NativeEndian.PutUint16(hdr[2:4], typ)
	b = append(b, hdr[:]...)
	b = append(b, v...)
	for i := l; i < align(l); i++ {
		b = append(b, 0)
	}
	return b
}

func putHdr(b []byte, l int, typ, flags uint16, seq uint32) {
	binary.NativeEndian.PutUint32(b[0:4], uint32(l))
	binary.NativeEndian.PutUint16(b[4:6], typ)
	binary.NativeEndian.PutUint16(b[6:8], flags)
	binary.NativeEndian.PutUint32(b[8:12], seq)
	binary.NativeEndian.PutUint32(b[12:16], 0)
}

// errno reads an NLMSG_ERROR payload; nil for an ack.
func errno(m []byte) error {
	if len(m) < unix.SizeofNlMsghdr+4 {
		return fmt.Errorf("short netlink error")
	}
	code := int32(binary.NativeEndian.Uint32(m[unix.SizeofNlMsghdr:]))
	if code == 0 {
		return nil
	}
	return unix.Errno(-code)
}

func align(l int) int { return (l + 3) &^ 3 }
