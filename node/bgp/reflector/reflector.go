// Package reflector is a route reflector's fast path to its clients. A
// reflector sends every client every other client's routes: N routes to N
// clients, a million deliveries at a thousand nodes. GoBGP does the
// work of each delivery apart (its export policy, a copy of the path and
// an UPDATE of its own, written with a system call of its own, per route
// and client), about ten times BIRD's cost. Here the reflector's clients'
// sessions are held by this package instead, and GoBGP sees the clients
// through two sessions of its own with it, on loopback:
//
//   - upstream: every client's routes, each with the client's path
//     identifier (ADD-PATH, so GoBGP has every path, as it would with the
//     clients themselves) and the client's BGP identifier as
//     ORIGINATOR_ID; GoBGP takes them as routes of a route-reflector
//     client, into its table, the kernel and the other sessions, as
//     before;
//   - downstream: a route-reflector client of GoBGP's, sent what GoBGP
//     sends a client (its best path of every prefix, reflected with
//     ORIGINATOR_ID and CLUSTER_LIST, and the node's own routes); each
//     message received here is sent, as received, to every client but
//     the route's originator, in one write per client per batch.
//
// GoBGP keeps everything else: the node's own routes, the kernel, every
// other session (non-clients, eBGP, clients with BGPFilters or other
// settings of their own). A client session is always opened by this
// end, and graceful restart (RFC 4724, with long-lived graceful restart,
// RFC 9494) is kept for the clients as GoBGP keeps it.
package reflector

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	log "github.com/sirupsen/logrus"
)

// Addresses of the two loopback sessions with the speaker: GoBGP dials
// them (neighbours at these addresses), and these are also their BGP
// identifiers.
var (
	UpstreamAddr   = netip.MustParseAddr("127.0.179.1")
	DownstreamAddr = netip.MustParseAddr("127.0.179.2")
)

// Config configures a Reflector.
type Config struct {
	// AS is the cluster's AS (of the node, its clients and the speaker);
	// RouterID the node's BGP identifier, which the clients see.
	AS       uint32
	RouterID netip.Addr
	Log      *log.Entry
	// Unsupported, when set, is told of a client the fast path cannot
	// serve (it does not announce 4-octet AS numbers, which the shared
	// messages need), so that GoBGP can take the session.
	Unsupported func(netip.AddrPort)
}

// Client is one desired client session.
type Client struct {
	Address netip.Addr
	// Port is the client's BGP port; 0 means 179.
	Port uint16
	// Source is the session's local address; invalid lets the kernel
	// pick.
	Source   netip.Addr
	Password string
	// Keepalive is the keepalive interval (the hold time is three times
	// it); 0 means 30 s.
	Keepalive time.Duration
	// RestartTime is the graceful restart time announced to the client;
	// LLGR announces long-lived graceful restart with the same stale
	// time.
	RestartTime time.Duration
	LLGR        bool
	// Restarting announces that this node restarted (graceful restart,
	// restarting side): the client is sent the table once it sent its
	// End-of-RIB.
	Restarting bool
	// Description is reported back in State.
	Description string
}

// Key identifies a client session: its address and port.
func (c Client) Key() netip.AddrPort { return netip.AddrPortFrom(c.Address, c.Port) }

func (c Client) dialPort() uint16 {
	if c.Port == 0 {
		return 179
	}
	return c.Port
}

// State is a client session's observed state.
type State struct {
	Client Client
	// FSM is the session state, named as BIRD and Calico name them.
	FSM    string
	Reason string
	Since  time.Time
	// Received counts the client's prefixes, UpdatesReceived its UPDATE
	// messages in the session, Advertised the prefixes sent to it.
	Received, UpdatesReceived, Advertised uint64
	// EndOfRIB is true once the client sent End-of-RIB for every family
	// of the session (always when it did not announce graceful restart).
	EndOfRIB bool
	// RouterID is the client's BGP identifier; RestartTime and LLGR what
	// it announced.
	RouterID netip.Addr
}

// Reflector holds the route-reflector clients' sessions.
type Reflector struct {
	cfg Config
	log *log.Entry
	ctx context.Context
	// stop ends everything; the listeners are closed by it.
	stop context.CancelFunc
	lns  []net.Listener
	port uint16

	mu      sync.Mutex
	clients map[netip.AddrPort]*client
	nextID  uint32
	tab     *table
	// up is the upstream session's writer (nil while it is down).
	up *upstream
	// ready is closed once both of the speaker's sessions have come up:
	// until then the clients are not dialled, as their routes could go
	// nowhere.
	ready              chan struct{}
	upReady, downReady bool
	// inbox carries what the clients send to the processor.
	inbox chan inMsg
	// writers send the clients what they are due.
	writers *writers
}

// New makes a reflector; Start runs it.
func New(cfg Config) *Reflector {
	if cfg.Log == nil {
		cfg.Log = log.NewEntry(log.StandardLogger())
	}
	return &Reflector{cfg: cfg, log: cfg.Log.WithField("component", "reflector"), clients: map[netip.AddrPort]*client{}, tab: newTable(),
		ready: make(chan struct{}), inbox: make(chan inMsg, 1024)}
}

// Start listens for the speaker's two sessions at UpstreamAddr and
// DownstreamAddr and returns the port, which the speaker dials.
func (r *Reflector) Start(ctx context.Context) (uint16, error) {
	r.ctx, r.stop = context.WithCancel(ctx)
	lc := net.ListenConfig{}
	lc.SetMultipathTCP(false)
	for attempt := 0; ; attempt++ {
		up, err := lc.Listen(r.ctx, "tcp", netip.AddrPortFrom(UpstreamAddr, 0).String())
		if err != nil {
			r.stop()
			return 0, fmt.Errorf("listening for the speaker at %s: %w", UpstreamAddr, err)
		}
		port := uint16(up.Addr().(*net.TCPAddr).Port)
		down, err := lc.Listen(r.ctx, "tcp", netip.AddrPortFrom(DownstreamAddr, port).String())
		if err != nil {
			up.Close()
			if attempt < 10 {
				continue
			}
			r.stop()
			return 0, fmt.Errorf("listening for the speaker at %s: %w", DownstreamAddr, err)
		}
		r.lns, r.port = []net.Listener{up, down}, port
		r.writers = newWriters(4)
		go func() { <-r.ctx.Done(); r.writers.stop() }()
		go r.processor()
		go r.accept(up, true)
		go r.accept(down, false)
		go func() { <-r.ctx.Done(); up.Close(); down.Close() }()
		return port, nil
	}
}

// Stop ends every session and the listeners.
func (r *Reflector) Stop() {
	if r.stop != nil {
		r.stop()
	}
	r.mu.Lock()
	for _, c := range r.clients {
		c.close(notification(bgp.BGP_ERROR_CEASE, bgp.BGP_ERROR_SUB_ADMINISTRATIVE_SHUTDOWN))
	}
	r.mu.Unlock()
}

// SetClient adds a client session, or changes one: a change of anything
// the session negotiated makes it again.
func (r *Reflector) SetClient(c Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.clients[c.Key()]; ok {
		old.reconfigure(c)
		return
	}
	r.nextID++
	cl := newClient(r, c, r.nextID)
	r.clients[c.Key()] = cl
	go cl.run()
}

// DeleteClient ends a client session (with a NOTIFICATION, as for a
// deconfigured peer) and withdraws its routes.
func (r *Reflector) DeleteClient(key netip.AddrPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clients[key]
	if !ok {
		return
	}
	delete(r.clients, key)
	c.delete()
}

// Converged says this node's restart is over: sessions made from now on
// do not announce one.
func (r *Reflector) Converged() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.clients {
		c.cfg.Restarting = false
	}
}

// Origin names the client session, of IPv6 or IPv4, whose BGP
// identifier is id (the ORIGINATOR_ID of its routes as the speaker has
// them): its address.
func (r *Reflector) Origin(id netip.Addr, v6 bool) (netip.Addr, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.clients {
		if c.established && c.caps.id == id && k.Addr().Is6() == v6 {
			return k.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// Route is one route of a client session, as a table shows it.
type Route struct {
	NLRI  bgp.AddrPrefixInterface
	Attrs []bgp.PathAttributeInterface
}

// Routes are the routes a client at addr sent (in) or is sent (out);
// false when no client session of the reflector has that address.
func (r *Reflector) Routes(addr netip.Addr, in bool) ([]Route, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var c *client
	for k, cl := range r.clients {
		if k.Addr() == addr {
			c = cl
		}
	}
	if c == nil {
		return nil, false
	}
	withNH := func(p netip.Prefix, attrs []bgp.PathAttributeInterface, nh, ll net.IP) Route {
		nlri := fromPrefix(p, 0)
		if p.Addr().Is4() {
			return Route{NLRI: nlri, Attrs: attrs}
		}
		mp := bgp.NewPathAttributeMpReachNLRI(nh.String(), []bgp.AddrPrefixInterface{nlri})
		if ll != nil {
			mp.LinkLocalNexthop = ll
		}
		return Route{NLRI: nlri, Attrs: append([]bgp.PathAttributeInterface{mp}, attrs...)}
	}
	var out []Route
	if in {
		for p, ir := range c.adjIn {
			out = append(out, withNH(p, ir.attrs, ir.nexthop, ir.linkLocal))
		}
		return out, true
	}
	if !c.established {
		return nil, true
	}
	_, llgr := c.caps.llgr[familyOf(addr)]
	for p, g := range r.tab.routes {
		if c.caps.families[g.family] && (!g.origin.IsValid() || g.origin != c.caps.id) && (!g.llgr || llgr) {
			out = append(out, withNH(p, g.attrs, g.nexthop, g.linkLocal))
		}
	}
	return out, true
}

// Has reports whether key is a client session of the reflector.
func (r *Reflector) Has(key netip.AddrPort) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.clients[key]
	return ok
}

// Clients lists the client sessions.
func (r *Reflector) Clients(advertised bool) []State {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]State, 0, len(r.clients))
	for _, c := range r.clients {
		out = append(out, c.state(advertised))
	}
	return out
}

// processor takes what the clients send, one message at a time.
func (r *Reflector) processor() {
	for {
		select {
		case <-r.ctx.Done():
			return
		case m := <-r.inbox:
			m.c.process(m)
		}
	}
}

// accept runs the speaker's sessions.
func (r *Reflector) accept(ln net.Listener, isUp bool) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if isUp {
			go r.runUpstream(c)
		} else {
			go r.runDownstream(c)
		}
	}
}

// internalOpen is what this end announces to the speaker.
func (r *Reflector) internalOpen(id netip.Addr, isUp bool) openParams {
	o := openParams{as: r.cfg.AS, id: id, hold: 90 * time.Second, families: families, restartTime: 120 * time.Second}
	if isUp {
		o.addPathSend = true
	} else {
		o.llgrTime = 24 * time.Hour
	}
	return o
}

// speakerSession checks that a session comes from the speaker and
// negotiates it.
func (r *Reflector) speakerSession(c net.Conn, isUp bool) (*bufio.Reader, peerCaps, error) {
	ra, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	if !ra.Addr().Unmap().IsLoopback() {
		return nil, peerCaps{}, fmt.Errorf("a connection from %s, not the speaker", ra)
	}
	id := DownstreamAddr
	if isUp {
		id = UpstreamAddr
	}
	br := bufio.NewReaderSize(c, 64<<10)
	pc, err := handshake(c, br, r.internalOpen(id, isUp), r.cfg.AS)
	return br, pc, err
}

// keepAlive sends KEEPALIVEs on a speaker session until done.
func keepAlive(c net.Conn, w *sync.Mutex, hold time.Duration, done <-chan struct{}) {
	if hold <= 0 {
		return
	}
	t := time.NewTicker(hold / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			w.Lock()
			_, err := c.Write(keepalive)
			w.Unlock()
			if err != nil {
				return
			}
		}
	}
}

// runDownstream reads what the speaker sends a client and logs it for
// the clients.
func (r *Reflector) runDownstream(c net.Conn) {
	defer c.Close()
	br, pc, err := r.speakerSession(c, false)
	if err != nil {
		r.log.WithError(err).Warn("The speaker's downstream session failed")
		return
	}
	var wmu sync.Mutex
	done := make(chan struct{})
	defer close(done)
	go keepAlive(c, &wmu, pc.hold, done)
	wmu.Lock()
	for _, f := range families {
		_, _ = c.Write(serialize(bgp.NewEndOfRib(f)))
	}
	wmu.Unlock()
	r.mu.Lock()
	r.tab.gen++
	clear(r.tab.eor)
	r.downReady = true
	r.readyLocked()
	r.mu.Unlock()
	r.log.Info("The speaker's downstream session is up")
	for {
		if pc.hold > 0 {
			_ = c.SetReadDeadline(time.Now().Add(pc.hold))
		}
		b, err := readMsg(br)
		if err != nil {
			if r.ctx.Err() == nil {
				r.log.WithError(err).Warn("The speaker's downstream session ended")
			}
			return
		}
		// Take what has arrived in one batch, then wake the clients once.
		batch := [][]byte{b}
		for br.Buffered() >= bgp.BGP_HEADER_LENGTH && len(batch) < 4096 {
			b, err := readMsg(br)
			if err != nil {
				return
			}
			batch = append(batch, b)
		}
		r.mu.Lock()
		for _, b := range batch {
			if msgType(b) != bgp.BGP_MSG_UPDATE {
				continue
			}
			m, err := bgp.ParseBGPMessage(b)
			if err != nil {
				r.log.WithError(err).Warn("Skipping an UPDATE from the speaker that does not decode")
				continue
			}
			ups := parseUpdate(m.Body.(*bgp.BGPUpdate))
			for _, u := range ups {
				r.tab.apply(u, b, len(ups) == 1)
			}
		}
		r.trimLocked()
		for _, cl := range r.clients {
			cl.wake()
		}
		r.mu.Unlock()
	}
}

// readyLocked releases the clients once both speaker sessions came up.
func (r *Reflector) readyLocked() {
	if r.upReady && r.downReady {
		select {
		case <-r.ready:
		default:
			close(r.ready)
		}
	}
}

// trimLocked drops the log entries every established client was sent.
func (r *Reflector) trimLocked() {
	low := r.tab.end()
	for _, c := range r.clients {
		if c.established && !c.pendingDump && c.cursor < low {
			low = c.cursor
		}
	}
	r.tab.trim(low)
}

// upstream is the writer of the upstream session.
type upstream struct {
	mu   sync.Mutex
	c    net.Conn
	buf  [][]byte
	wake chan struct{}
}

func (u *upstream) send(msgs ...[]byte) {
	u.mu.Lock()
	u.buf = append(u.buf, msgs...)
	u.mu.Unlock()
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

func (u *upstream) run(done <-chan struct{}, hold time.Duration) {
	var t *time.Ticker
	var tick <-chan time.Time
	if hold > 0 {
		t = time.NewTicker(hold / 3)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-done:
			return
		case <-u.wake:
		case <-tick:
			u.send(keepalive)
			continue
		}
		u.mu.Lock()
		bufs := net.Buffers(u.buf)
		u.buf = nil
		u.mu.Unlock()
		if _, err := bufs.WriteTo(u.c); err != nil {
			u.c.Close()
			return
		}
	}
}

// runUpstream sends the clients' routes to the speaker (and throws away
// what the speaker sends this session).
func (r *Reflector) runUpstream(c net.Conn) {
	defer c.Close()
	br, pc, err := r.speakerSession(c, true)
	if err != nil {
		r.log.WithError(err).Warn("The speaker's upstream session failed")
		return
	}
	up := &upstream{c: c, wake: make(chan struct{}, 1)}
	done := make(chan struct{})
	defer close(done)
	go up.run(done, pc.hold)
	r.mu.Lock()
	// Every client's routes, then End-of-RIB: nothing more to wait for.
	for _, cl := range r.clients {
		up.send(cl.allUpstream()...)
	}
	for _, f := range families {
		up.send(serialize(bgp.NewEndOfRib(f)))
	}
	r.up = up
	r.upReady = true
	r.readyLocked()
	r.mu.Unlock()
	r.log.Info("The speaker's upstream session is up")
	defer func() {
		r.mu.Lock()
		if r.up == up {
			r.up = nil
		}
		r.mu.Unlock()
	}()
	for {
		if pc.hold > 0 {
			_ = c.SetReadDeadline(time.Now().Add(pc.hold))
		}
		if _, err := readMsg(br); err != nil {
			if r.ctx.Err() == nil {
				r.log.WithError(err).Warn("The speaker's upstream session ended")
			}
			return
		}
	}
}

// toSpeaker sends messages upstream (dropped while the session is down:
// it is sent every route again when it comes up).
func (r *Reflector) toSpeakerLocked(msgs [][]byte) {
	if r.up != nil && len(msgs) > 0 {
		r.up.send(msgs...)
	}
}
