package kubecontrollers

import (
	"io"
	"net"
	"sync"
	"testing"
)

// relay forwards TCP connections from a loopback port to target, and can
// cut every connection (and refuse new ones) until restored: an outage of
// whatever is behind it, as its clients see it.
type relay struct {
	t      testing.TB
	target string
	addr   string
	mu     sync.Mutex
	l      net.Listener
	conns  map[net.Conn]bool
}

func newRelay(t testing.TB, target string) *relay {
	t.Helper()
	r := &relay{t: t, target: target, conns: map[net.Conn]bool{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = l.Addr().String()
	r.serve(l)
	t.Cleanup(r.cut)
	return r
}

func (r *relay) serve(l net.Listener) {
	r.mu.Lock()
	r.l = l
	r.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go r.pipe(c)
		}
	}()
}

func (r *relay) pipe(c net.Conn) {
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	if r.l == nil {
		r.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	r.conns[c], r.conns[up] = true, true
	r.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close(); c.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
	up.Close()
}

// cut closes the listener and every connection.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.l != nil {
		r.l.Close()
		r.l = nil
	}
	for c := range r.conns {
		c.Close()
	}
	r.conns = map[net.Conn]bool{}
}

// restore listens again on the same address.
func (r *relay) restore() {
	r.t.Helper()
	l, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.serve(l)
}
