package etcdv3_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// proxy forwards loopback TCP connections to etcd and can cut them, so a
// test can disconnect a client from a server that keeps running.
type proxy struct {
	target string
	l      net.Listener
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

// startProxy forwards a fresh loopback port to the host:port of endpoint.
func startProxy(t *testing.T, endpoint string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{target: strings.TrimPrefix(strings.TrimPrefix(endpoint, "http://"), "https://"), l: l}
	t.Cleanup(func() {
		l.Close()
		p.Cut()
	})
	go p.serve()
	return p
}

// Endpoint is the URL clients dial instead of etcd's.
func (p *proxy) Endpoint() string { return "http://" + p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go pipe(c, up)
		go pipe(up, c)
	}
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Cut closes every forwarded connection and refuses new ones.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore lets connections through again.
func (p *proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}
