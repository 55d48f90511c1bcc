package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Relay forwards TCP connections from a loopback port to etcd and can
// take etcd away from its clients in the two ways an outage looks to
// them: Refuse, as a stopped etcd (connections reset, new ones refused),
// and Hang, as a frozen one or a network that drops packets (no byte
// moves either way; new connections are accepted by the kernel but never
// answered). Restore ends either. The relay is plain TCP, so TLS passes
// through it untouched.
type Relay struct {
	target, scheme, addr string

	mu    sync.Mutex
	l     net.Listener
	conns map[net.Conn]bool
	// flowing is closed while bytes may move; Hang replaces it with an
	// open channel that Restore closes.
	flowing chan struct{}
	// hanging and refused are the current outage, if any.
	hanging, refused, closed bool
}

// StartRelay listens on a free loopback port in the caller's network
// namespace and forwards to the host:port of endpoint (a URL). It is
// closed when the test ends.
func StartRelay(t testing.TB, endpoint string) *Relay {
	t.Helper()
	scheme, target, ok := strings.Cut(endpoint, "://")
	if !ok {
		t.Fatalf("relay: endpoint %q is not a URL", endpoint)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	flowing := make(chan struct{})
	close(flowing)
	r := &Relay{target: target, scheme: scheme, addr: l.Addr().String(), l: l, conns: map[net.Conn]bool{}, flowing: flowing}
	go r.serve(l)
	t.Cleanup(r.close)
	return r
}

// Endpoint is the URL clients use instead of etcd's.
func (r *Relay) Endpoint() string { return r.scheme + "://" + r.addr }

// Refuse resets every connection and refuses new ones until Restore.
func (r *Relay) Refuse() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused || r.closed {
		return
	}
	r.refused = true
	r.l.Close()
	r.dropLocked()
}

// Hang stops every byte in both directions, on existing connections and
// on those accepted meanwhile, until Restore.
func (r *Relay) Hang() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hanging || r.closed {
		return
	}
	r.hanging = true
	r.flowing = make(chan struct{})
}

// Restore ends an outage: after Refuse it listens on the same port again,
// after Hang it lets the held bytes and connections through.
func (r *Relay) Restore() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hanging {
		r.hanging = false
		close(r.flowing)
	}
	if !r.refused {
		return nil
	}
	// The port was ours a moment ago; another process may take it, so
	// try for a little while before giving up.
	var err error
	for deadline := time.Now().Add(2 * time.Second); ; {
		var l net.Listener
		if l, err = net.Listen("tcp", r.addr); err == nil {
			r.l, r.refused = l, false
			go r.serve(l)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("relay: listening on %s again: %w", r.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// close ends the relay for good.
func (r *Relay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.l.Close()
	r.dropLocked()
	if r.hanging {
		r.hanging = false
		close(r.flowing)
	}
}

// dropLocked resets every connection; r.mu is held.
func (r *Relay) dropLocked() {
	for c := range r.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as from a process that died
		}
		c.Close()
	}
	clear(r.conns)
}

// gate returns the channel to wait on before moving bytes.
func (r *Relay) gate() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flowing
}

// track records a connection; false when the relay dropped everything
// meanwhile (the connection is then closed).
func (r *Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused || r.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = true
	}
	return true
}

func (r *Relay) serve(l net.Listener) {
	for {
		in, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go r.forward(in)
	}
}

// forward connects one accepted connection to etcd, once bytes flow.
func (r *Relay) forward(in net.Conn) {
	if !r.track(in) {
		return
	}
	<-r.gate()
	out, err := net.Dial("tcp", r.target)
	if err != nil {
		in.Close()
		return
	}
	if !r.track(out) {
		in.Close()
		return
	}
	go r.pipe(out, in)
	r.pipe(in, out)
}

// pipe copies src to dst, holding each chunk while the relay hangs.
func (r *Relay) pipe(dst, src net.Conn) {
	defer func() {
		dst.Close()
		src.Close()
		r.mu.Lock()
		delete(r.conns, dst)
		delete(r.conns, src)
		r.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-r.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
			}
			return
		}
	}
}
