package reflector

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// How long a client session waits before dialling again, and how long a
// restarted reflector waits for a client's End-of-RIB before sending it
// the table anyway (GoBGP's deferral time).
const (
	retryInterval = time.Second
	deferralTime  = 360 * time.Second
)

// inRoute is a route a client sent, as sent upstream.
type inRoute struct {
	family             bgp.RouteFamily
	attrs              []bgp.PathAttributeInterface
	nexthop, linkLocal net.IP
	// stale: kept while the client restarts (graceful restart);
	// llgrStale: kept past the restart time, marked LLGR_STALE.
	stale, llgrStale bool
}

// client is one client session, kept while it is configured; its fields
// are guarded by the reflector's mutex.
type client struct {
	r  *Reflector
	id uint32 // the ADD-PATH path identifier of its routes upstream

	cfg     Client
	deleted bool
	// kick interrupts a wait to dial (a changed configuration, a
	// deletion).
	kick chan struct{}

	// The session.
	conn        net.Conn
	wmu         *sync.Mutex
	established bool
	fsm, reason string
	since       time.Time
	caps        peerCaps
	// pendingDump: the table is still to be sent (deferred while this
	// node restarts until the client's End-of-RIB, or deferUntil).
	pendingDump bool
	deferDump   bool
	deferUntil  time.Time
	cursor      int64
	eorDue      map[bgp.RouteFamily]bool
	recvEOR     map[bgp.RouteFamily]bool
	updates     uint64
	// dumpQueue is the rest of the table being sent; kaDue a KEEPALIVE
	// to send; ka the keepalive timer, deferTimer the deferral's.
	dumpQueue  [][]byte
	kaDue      bool
	ka         *time.Timer
	deferTimer *time.Timer
	// queued says the client waits for a writer; out is what a write
	// that timed out left to send, first; stalled since when no byte
	// went out.
	queued  atomic.Bool
	out     []byte
	stalled time.Time
	// loopback: the session runs on loopback addresses at both ends, so
	// loopback next hops are taken (as GoBGP takes them).
	loopback bool
	// endErr says why the processor ended the session.
	endErr error

	adjIn map[netip.Prefix]*inRoute
	// staleTimer ends graceful restart; staleLLGR are the stale times of
	// the families of the session that ended.
	staleTimer *time.Timer
	staleLLGR  map[bgp.RouteFamily]time.Duration
}

func newClient(r *Reflector, c Client, id uint32) *client {
	return &client{r: r, id: id, cfg: c, kick: make(chan struct{}, 1), fsm: "Idle", since: time.Now(),
		adjIn: map[netip.Prefix]*inRoute{}}
}

// wake has the client sent what is new: one of the reflector's writers
// will flush it.
func (c *client) wake() {
	if c.queued.CompareAndSwap(false, true) {
		c.r.writers.push(c)
	}
}

func (c *client) kickLocked() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// reconfigure takes a changed configuration; a change the session
// negotiated (or dialled) with makes it again.
func (c *client) reconfigure(n Client) {
	old := c.cfg
	c.cfg = n
	if old.Password != n.Password || old.Source != n.Source || old.Keepalive != n.Keepalive ||
		old.RestartTime != n.RestartTime || old.LLGR != n.LLGR {
		if c.conn != nil {
			c.close(notification(bgp.BGP_ERROR_CEASE, bgp.BGP_ERROR_SUB_OTHER_CONFIGURATION_CHANGE))
		}
		c.kickLocked()
	}
}

// delete ends the session for good and withdraws the client's routes.
func (c *client) delete() {
	c.deleted = true
	if c.conn != nil {
		c.close(notification(bgp.BGP_ERROR_CEASE, bgp.BGP_ERROR_SUB_PEER_DECONFIGURED))
	}
	c.withdrawLocked(func(*inRoute) bool { return true })
	if c.staleTimer != nil {
		c.staleTimer.Stop()
	}
	c.kickLocked()
}

// close sends msg (a NOTIFICATION) and closes the session's connection,
// without waiting for a write in progress.
func (c *client) close(msg []byte) {
	if c.conn != nil {
		closeConn(c.conn, c.wmu, msg)
	}
}

func closeConn(conn net.Conn, wmu *sync.Mutex, msg []byte) {
	_ = conn.SetWriteDeadline(time.Now())
	go func() {
		wmu.Lock()
		defer wmu.Unlock()
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		if msg != nil {
			_, _ = conn.Write(msg)
		}
		conn.Close()
	}()
}

// wait pauses before dialling again; false when the client was deleted
// or the reflector stopped.
func (c *client) wait(d time.Duration) bool {
	select {
	case <-c.r.ctx.Done():
		return false
	case <-c.kick:
	case <-time.After(d):
	}
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	return !c.deleted
}

func (c *client) setState(fsm, reason string) {
	c.r.mu.Lock()
	if c.fsm != fsm || (fsm == "Established") != c.established {
		c.since = time.Now()
	}
	c.fsm = fsm
	if reason != "" {
		c.reason = reason
	}
	c.r.mu.Unlock()
}

// run dials the client until a session is Established, then hands it to
// a reader of its own and returns: a client keeps one goroutine, with a
// small stack, while its session is up (they are many). The reader,
// when the session ends, starts run again after a pause.
func (c *client) run() {
	select {
	case <-c.r.ready:
	case <-c.r.ctx.Done():
		return
	}
	for {
		c.r.mu.Lock()
		cfg, deleted := c.cfg, c.deleted
		c.r.mu.Unlock()
		if deleted || c.r.ctx.Err() != nil {
			return
		}
		c.setState("Connect", "")
		conn, err := c.dial(cfg)
		if err != nil {
			c.setState("Active", "Connect failed: "+err.Error())
			if !c.wait(retryInterval) {
				return
			}
			continue
		}
		c.setState("OpenSent", "")
		// Clients send little: a small buffer (their sessions are many).
		br := bufio.NewReaderSize(conn, 512)
		o := openParams{as: c.r.cfg.AS, id: c.r.cfg.RouterID, hold: 3 * cfg.keepalive(), families: []bgp.RouteFamily{familyOf(cfg.Address)},
			restartTime: cfg.RestartTime, restarting: cfg.Restarting}
		if cfg.LLGR {
			o.llgrTime = cfg.RestartTime
		}
		caps, err := handshake(conn, br, o, c.r.cfg.AS)
		if errors.Is(err, errNoAS4) && c.r.cfg.Unsupported != nil {
			conn.Close()
			c.setState("Active", "Went down in OpenSent: "+err.Error())
			go c.r.cfg.Unsupported(cfg.Key())
			return
		}
		if err != nil {
			conn.Close()
			c.setState("Active", "Went down in OpenSent: "+err.Error())
			if !c.wait(retryInterval) {
				return
			}
			continue
		}
		if c.establish(conn, caps, cfg) {
			go c.read(conn, br, caps.hold)
		}
		return
	}
}

// again runs the client's dialling again after a pause, unless it was
// deleted meanwhile.
func (c *client) again() {
	select {
	case <-c.r.ctx.Done():
	case <-c.kick:
		go c.run()
	case <-time.After(retryInterval):
		go c.run()
	}
}

func (cfg Client) keepalive() time.Duration {
	if cfg.Keepalive <= 0 {
		return 30 * time.Second
	}
	return cfg.Keepalive
}

func (c *client) dial(cfg Client) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: dialControl(cfg.Address, cfg.Password)}
	d.SetMultipathTCP(false)
	if cfg.Source.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(cfg.Source, 0))
	}
	ctx, cancel := context.WithCancel(c.r.ctx)
	defer cancel()
	go func() {
		select {
		case <-c.kick:
			cancel()
		case <-ctx.Done():
		}
	}()
	return d.DialContext(ctx, "tcp", netip.AddrPortFrom(cfg.Address, cfg.dialPort()).String())
}

// establish records a new session and starts sending it the table;
// false when the client was deleted meanwhile.
func (c *client) establish(conn net.Conn, caps peerCaps, cfg Client) bool {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.deleted {
		conn.Close()
		return false
	}
	c.conn, c.wmu, c.caps = conn, &sync.Mutex{}, caps
	la, _ := netip.ParseAddrPort(conn.LocalAddr().String())
	ra, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
	c.loopback = la.Addr().Unmap().IsLoopback() && ra.Addr().Unmap().IsLoopback()
	c.established, c.endErr = true, nil
	c.since, c.fsm, c.reason = time.Now(), "Established", ""
	c.updates = 0
	c.recvEOR = map[bgp.RouteFamily]bool{}
	c.eorDue = map[bgp.RouteFamily]bool{}
	for f := range caps.families {
		c.eorDue[f] = true
	}
	c.pendingDump = true
	c.dumpQueue = nil
	c.deferDump = cfg.Restarting && caps.gr
	if c.deferDump {
		c.deferTimer = time.AfterFunc(deferralTime, func() {
			r.mu.Lock()
			if c.conn == conn {
				c.deferDump = false
			}
			r.mu.Unlock()
			c.wake()
		})
	}
	if caps.hold > 0 {
		c.ka = time.AfterFunc(caps.hold/3, c.keepaliveDue(conn, caps.hold/3))
	}
	c.cursor = r.tab.end()
	r.log.WithField("client", cfg.Key()).Debug("Client session established")
	c.wake()
	return true
}

// inMsg is a message a client sent, for the reflector's processor.
type inMsg struct {
	c    *client
	conn net.Conn
	b    []byte
}

// read reads the session's messages until it ends: KEEPALIVEs here, the
// rest in the reflector's processor (one for all clients, under the
// reflector's lock anyway), so that this goroutine's stack stays small.
func (c *client) read(conn net.Conn, br *bufio.Reader, hold time.Duration) {
	var err error
	for {
		if hold > 0 {
			_ = conn.SetReadDeadline(time.Now().Add(hold))
		}
		var b []byte
		if b, err = readMsg(br); err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				err = errors.New("hold timer expired")
				c.r.mu.Lock()
				if c.conn == conn {
					closeConn(conn, c.wmu, notification(bgp.BGP_ERROR_HOLD_TIMER_EXPIRED, 0))
				}
				c.r.mu.Unlock()
			case errors.Is(err, io.EOF):
				err = errors.New("the peer closed the connection")
			}
			break
		}
		if msgType(b) != bgp.BGP_MSG_KEEPALIVE {
			select {
			case c.r.inbox <- inMsg{c, conn, b}:
			case <-c.r.ctx.Done():
				return
			}
		}
	}
	c.r.mu.Lock()
	if c.conn == conn {
		if c.endErr != nil {
			err = c.endErr
		}
		c.r.log.WithError(err).WithField("client", c.cfg.Key()).Info("Client session ended")
		c.teardownLocked(err)
	}
	c.r.mu.Unlock()
	c.again()
}

// process takes a message a client sent (the processor's work).
func (c *client) process(m inMsg) {
	r := c.r
	r.mu.Lock()
	if c.conn != m.conn {
		r.mu.Unlock()
		return
	}
	var err error
	switch msgType(m.b) {
	case bgp.BGP_MSG_UPDATE:
		err = c.onUpdateLocked(m.b)
	case bgp.BGP_MSG_ROUTE_REFRESH:
		if !c.deferDump {
			c.pendingDump = true
		}
		defer c.wake()
	case bgp.BGP_MSG_NOTIFICATION:
		err = errors.New("the peer sent a NOTIFICATION")
		if pm, perr := bgp.ParseBGPMessage(m.b); perr == nil {
			n := pm.Body.(*bgp.BGPNotification)
			err = errNotification{n.ErrorCode, n.ErrorSubcode}
		}
		m.conn.Close()
	default:
		err = fmt.Errorf("unexpected message type %d", msgType(m.b))
		c.close(notification(bgp.BGP_ERROR_FSM_ERROR, 0))
	}
	if err != nil && c.endErr == nil {
		c.endErr = err
	}
	r.mu.Unlock()
}

// onUpdateLocked takes a client's UPDATE: into its Adj-RIB-In, and
// upstream with its path identifier and ORIGINATOR_ID.
func (c *client) onUpdateLocked(b []byte) error {
	m, err := bgp.ParseBGPMessage(b)
	r := c.r
	rfs := map[bgp.RouteFamily]bgp.BGPAddPathMode{}
	for f := range c.caps.families {
		rfs[f] = bgp.BGP_ADD_PATH_NONE
	}
	if err == nil {
		_, err = bgp.ValidateUpdateMsg(m.Body.(*bgp.BGPUpdate), rfs, false, false, c.loopback)
	}
	if err != nil {
		var me *bgp.MessageError
		if !errors.As(err, &me) || me.ErrorHandling != bgp.ERROR_HANDLING_TREAT_AS_WITHDRAW || m == nil {
			code, sub := uint8(bgp.BGP_ERROR_UPDATE_MESSAGE_ERROR), uint8(0)
			if me != nil && me.TypeCode != 0 {
				code, sub = me.TypeCode, me.SubTypeCode
			}
			c.close(notification(code, sub))
			return fmt.Errorf("a malformed UPDATE: %w", err)
		}
		r.log.WithError(err).WithField("client", c.cfg.Key()).Warn("Treating a malformed UPDATE as a withdrawal")
		m.Body = bgp.TreatAsWithdraw(m.Body.(*bgp.BGPUpdate))
	}
	c.updates++
	for _, u := range parseUpdate(m.Body.(*bgp.BGPUpdate)) {
		if !c.caps.families[u.family] {
			continue
		}
		if u.eor {
			c.recvEOR[u.family] = true
			c.withdrawLocked(func(in *inRoute) bool { return in.family == u.family && (in.stale || in.llgrStale) })
			if c.deferDump && len(c.recvEOR) == len(c.caps.families) {
				c.deferDump = false
				c.wake()
			}
			continue
		}
		for _, p := range u.withdrawn {
			delete(c.adjIn, p)
		}
		attrs := u.attrs
		if len(u.announced) > 0 && !originator(attrs).IsValid() {
			attrs = append(slices.Clone(attrs), bgp.NewPathAttributeOriginatorId(c.caps.id.String()))
		}
		for _, p := range u.announced {
			c.adjIn[p] = &inRoute{family: u.family, attrs: attrs, nexthop: u.nexthop, linkLocal: u.linkLocal}
		}
		r.toSpeakerLocked(encode(u.family, u.withdrawn, attrs, u.nexthop, u.linkLocal, u.announced, c.id))
	}
	return nil
}

// allUpstream encodes every route of the client for a new upstream
// session.
func (c *client) allUpstream() [][]byte {
	var out [][]byte
	for p, in := range c.adjIn {
		out = append(out, encode(in.family, nil, in.attrs, in.nexthop, in.linkLocal, []netip.Prefix{p}, c.id)...)
	}
	return out
}

// withdrawLocked withdraws upstream the client's routes that match.
func (c *client) withdrawLocked(match func(*inRoute) bool) {
	byFam := map[bgp.RouteFamily][]netip.Prefix{}
	for p, in := range c.adjIn {
		if match(in) {
			byFam[in.family] = append(byFam[in.family], p)
			delete(c.adjIn, p)
		}
	}
	for f, ps := range byFam {
		c.r.toSpeakerLocked(encode(f, ps, nil, nil, nil, nil, c.id))
	}
}

// teardownLocked ends a session: the client's routes are kept as stale
// for its restart time when it announced graceful restart (unless it
// ended the session with a NOTIFICATION that does not allow it), and
// withdrawn otherwise.
func (c *client) teardownLocked(err error) {
	if c.conn != nil {
		c.conn.Close()
	}
	c.conn, c.established = nil, false
	c.fsm, c.since = "Idle", time.Now()
	c.dumpQueue, c.out = nil, nil
	for _, t := range []*time.Timer{c.ka, c.deferTimer} {
		if t != nil {
			t.Stop()
		}
	}
	if err != nil {
		c.reason = "Went down in Established: " + err.Error()
	}
	if c.deleted {
		return
	}
	gr := c.caps.gr
	var ne errNotification
	if errors.As(err, &ne) {
		hardReset := ne.code == bgp.BGP_ERROR_CEASE && ne.sub == bgp.BGP_ERROR_SUB_HARD_RESET
		gr = gr && c.caps.grNotification && !hardReset
	}
	if !gr {
		c.withdrawLocked(func(*inRoute) bool { return true })
		return
	}
	for _, in := range c.adjIn {
		in.stale = true
	}
	c.staleLLGR = c.caps.llgr
	if c.staleTimer != nil {
		c.staleTimer.Stop()
	}
	c.staleTimer = time.AfterFunc(c.caps.grTime, c.restartTimeUp)
}

// restartTimeUp ends graceful restart: the routes still stale are
// withdrawn, or, in the families with long-lived graceful restart, sent
// again marked LLGR_STALE (unless NO_LLGR) and kept for the stale time.
func (c *client) restartTimeUp() {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.deleted {
		return
	}
	var llgrFor time.Duration
	for p, in := range c.adjIn {
		if !in.stale {
			continue
		}
		t, ok := c.staleLLGR[in.family]
		if _, no := communities(in.attrs); !ok || t == 0 || no {
			continue
		}
		in.stale, in.llgrStale = false, true
		in.attrs = withCommunity(in.attrs, uint32(bgp.COMMUNITY_LLGR_STALE))
		r.toSpeakerLocked(encode(in.family, nil, in.attrs, in.nexthop, in.linkLocal, []netip.Prefix{p}, c.id))
		llgrFor = max(llgrFor, t)
	}
	c.withdrawLocked(func(in *inRoute) bool { return in.stale })
	if llgrFor > 0 {
		c.staleTimer = time.AfterFunc(llgrFor, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if !c.deleted {
				c.withdrawLocked(func(in *inRoute) bool { return in.llgrStale })
			}
		})
	}
}

// withCommunity adds a community to attrs (a copy).
func withCommunity(attrs []bgp.PathAttributeInterface, v uint32) []bgp.PathAttributeInterface {
	out := make([]bgp.PathAttributeInterface, 0, len(attrs)+1)
	found := false
	for _, a := range attrs {
		if cs, ok := a.(*bgp.PathAttributeCommunities); ok {
			found = true
			if !slices.Contains(cs.Value, v) {
				a = bgp.NewPathAttributeCommunities(append(slices.Clone(cs.Value), v))
			}
		}
		out = append(out, a)
	}
	if !found {
		out = append(out, bgp.NewPathAttributeCommunities([]uint32{v}))
	}
	return out
}

// keepaliveDue is the keepalive timer's function for the session on
// conn: a KEEPALIVE every interval.
func (c *client) keepaliveDue(conn net.Conn, interval time.Duration) func() {
	return func() {
		c.r.mu.Lock()
		live := c.conn == conn
		if live {
			c.kaDue = true
			c.ka.Reset(interval)
		}
		c.r.mu.Unlock()
		if live {
			c.wake()
		}
	}
}

// A flush writes at most writeBatch messages, and about writeChunk
// bytes, with one system call. They are copied out of the table and log
// into the writer's buffer, which it keeps for its next flush: a client
// holds no memory of its own for writing (they are many), and the
// million deliveries of a thousand clients' convergence make no garbage
// (they made ~70 MB, which grew the heap between collections). A write
// that cannot finish within writeWait (the client reads slowly) keeps a
// copy of the rest for the next flush, so that the few writers never
// wait on one client.
const (
	writeBatch = 64
	writeChunk = 16 << 10
	writeWait  = 20 * time.Millisecond
	// A writer keeps a buffer up to this size (a batch is writeChunk
	// and one message more).
	maxWriterBuffer = 2*writeChunk + bgp.BGP_MAX_MESSAGE_LENGTH
)

// flush sends the client what it is due: a KEEPALIVE, the table (once
// the session is up, or once its End-of-RIB came while this node
// restarts), what the log adds, and End-of-RIB when the speaker's table
// is complete, one write's worth; the client is queued again when there
// is more. buf is the writer's buffer; flush returns it for the next.
func (c *client) flush(buf []byte) []byte {
	r := c.r
	r.mu.Lock()
	conn, wmu, caps := c.conn, c.wmu, c.caps
	if conn == nil {
		r.mu.Unlock()
		return buf
	}
	if !wmu.TryLock() {
		// Another writer flushes it (or a NOTIFICATION is being
		// written): again shortly, for what came meanwhile.
		r.mu.Unlock()
		time.AfterFunc(writeWait, c.wake)
		return buf
	}
	defer wmu.Unlock()
	b := append(buf[:0], c.out...)
	c.out = nil
	var refs [writeBatch][]byte
	msgs, size := refs[:0], len(b)
	add := func(m []byte) {
		msgs = append(msgs, m)
		size += len(m)
	}
	full := func() bool { return len(msgs) >= writeBatch-2 || size >= writeChunk }
	if c.kaDue {
		add(keepalive)
		c.kaDue = false
	}
	if c.pendingDump && !c.deferDump {
		c.dumpQueue = r.tab.dump(caps.families, caps.id, len(caps.llgr) > 0)
		c.cursor = r.tab.end()
		c.pendingDump = false
	}
	for len(c.dumpQueue) > 0 && !full() {
		add(c.dumpQueue[0])
		c.dumpQueue[0] = nil
		c.dumpQueue = c.dumpQueue[1:]
	}
	if len(c.dumpQueue) == 0 {
		c.dumpQueue = nil
	}
	if !c.pendingDump && c.dumpQueue == nil {
		t := r.tab
		seq := max(c.cursor, t.base)
		for ; seq < t.end() && !full(); seq++ {
			e := &t.log[seq-t.base]
			if !caps.families[e.family] {
				continue
			}
			if e.eor {
				if c.eorDue[e.family] {
					add(serialize(bgp.NewEndOfRib(e.family)))
					delete(c.eorDue, e.family)
				}
				continue
			}
			_, llgr := caps.llgr[e.family]
			for _, m := range e.pick(caps.id, llgr) {
				add(m)
			}
		}
		c.cursor = seq
		if seq == t.end() {
			for f := range c.eorDue {
				if t.eor[f] {
					add(serialize(bgp.NewEndOfRib(f)))
					delete(c.eorDue, f)
				}
			}
		}
	}
	more := full()
	b = slices.Grow(b, size-len(b))
	for _, m := range msgs {
		b = append(b, m...)
	}
	clear(msgs)
	r.mu.Unlock()
	if len(b) == 0 {
		return b
	}
	_ = conn.SetWriteDeadline(time.Now().Add(writeWait))
	n, err := conn.Write(b)
	var ne net.Error
	switch {
	case err == nil:
		c.stalled = time.Time{}
	case errors.As(err, &ne) && ne.Timeout():
		// The client reads slowly: keep the rest, try again soon; a
		// client that takes nothing for its hold time is gone.
		r.mu.Lock()
		if c.conn == conn {
			c.out = bytes.Clone(b[n:])
		}
		r.mu.Unlock()
		if n > 0 || c.stalled.IsZero() {
			c.stalled = time.Now()
		} else if caps.hold > 0 && time.Since(c.stalled) > caps.hold {
			conn.Close()
			return b
		}
		time.AfterFunc(writeWait, c.wake)
		return b
	default:
		conn.Close()
		return b
	}
	if more {
		c.wake()
	}
	return b
}

// writers flush the clients that have something to send, a few at a
// time, however many clients there are.
type writers struct {
	mu   sync.Mutex
	cond *sync.Cond
	q    []*client
	done bool
}

func newWriters(n int) *writers {
	w := &writers{}
	w.cond = sync.NewCond(&w.mu)
	for range n {
		go w.run()
	}
	return w
}

func (w *writers) push(c *client) {
	w.mu.Lock()
	w.q = append(w.q, c)
	w.mu.Unlock()
	w.cond.Signal()
}

func (w *writers) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
	w.cond.Broadcast()
}

func (w *writers) run() {
	var buf []byte
	for {
		w.mu.Lock()
		for len(w.q) == 0 && !w.done {
			w.cond.Wait()
		}
		if w.done {
			w.mu.Unlock()
			return
		}
		c := w.q[0]
		w.q[0] = nil
		w.q = w.q[1:]
		if len(w.q) == 0 {
			w.q = nil
		}
		w.mu.Unlock()
		c.queued.Store(false)
		if buf = c.flush(buf); cap(buf) > maxWriterBuffer {
			buf = nil // what a slow client had left over; not kept
		}
	}
}

// state reports the session.
func (c *client) state(advertised bool) State {
	s := State{Client: c.cfg, FSM: c.fsm, Since: c.since, Received: uint64(len(c.adjIn)), UpdatesReceived: c.updates, EndOfRIB: true}
	if c.fsm != "Established" {
		s.Reason = c.reason
	} else {
		s.RouterID = c.caps.id
		if c.caps.gr {
			for f := range c.caps.families {
				s.EndOfRIB = s.EndOfRIB && c.recvEOR[f]
			}
		}
		if advertised {
			for _, g := range c.r.tab.routes {
				if c.caps.families[g.family] && g.origin != c.caps.id {
					s.Advertised++
				}
			}
		}
	}
	return s
}
