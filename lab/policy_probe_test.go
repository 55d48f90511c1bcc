package lab

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// This file holds the policy tests' probes: a server in every pod answering
// TCP and UDP on a few ports and recording the raw SCTP packets that reach
// it, and clients sending one probe of each protocol from a pod.

// probeTimeout is how long a probe waits before calling its traffic
// dropped.
const probeTimeout = 500 * time.Millisecond

// probeServer answers probes inside one pod.
type probeServer struct {
	pod     string
	closers []io.Closer
	mu      sync.Mutex
	// sctp wakes the waiter of each expected SCTP packet, keyed by
	// "srcIP:srcPort>dstPort".
	sctp map[string]chan struct{}
}

// serveProbes starts a probe server in pod (namespace/name): TCP accepts
// and writes the peer's address, UDP echoes it, and a raw IP socket sees
// every SCTP packet (the kernel has no SCTP stack; netfilter still
// matches and tracks SCTP, so policy applies to those packets).
func serveProbes(l *Lab, pod string, ports []int) (*probeServer, error) {
	s := &probeServer{pod: pod, sctp: map[string]chan struct{}{}}
	var raw *net.IPConn
	err := l.InNamespace(pod, func() error {
		for _, p := range ports {
			tl, err := net.Listen("tcp4", ":"+strconv.Itoa(p))
			if err != nil {
				return err
			}
			s.closers = append(s.closers, tl)
			go serveTCP(tl)
			ul, err := net.ListenPacket("udp4", ":"+strconv.Itoa(p))
			if err != nil {
				return err
			}
			s.closers = append(s.closers, ul)
			go serveUDP(ul)
		}
		c, err := net.ListenIP("ip4:"+strconv.Itoa(ipProtoSCTP), nil)
		if err != nil {
			return fmt.Errorf("raw SCTP socket: %w", err)
		}
		raw = c
		s.closers = append(s.closers, c)
		return nil
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("probe server in %s: %w", pod, err)
	}
	go s.readSCTP(raw)
	return s, nil
}

func serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte(c.RemoteAddr().String()))
		_ = c.Close()
	}
}

func serveUDP(c net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		_, addr, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = c.WriteTo([]byte(addr.String()), addr)
	}
}

// readSCTP records the SCTP packets that arrive (the IP header is already
// stripped: the common header's ports come first).
func (s *probeServer) readSCTP(c *net.IPConn) {
	buf := make([]byte, 2048)
	for {
		n, addr, err := c.ReadFromIP(buf)
		if err != nil {
			return
		}
		if n < 12 {
			continue
		}
		key := sctpKey(addr.IP, binary.BigEndian.Uint16(buf[0:]), binary.BigEndian.Uint16(buf[2:]))
		s.mu.Lock()
		if ch, ok := s.sctp[key]; ok {
			close(ch)
			delete(s.sctp, key)
		}
		s.mu.Unlock()
	}
}

func sctpKey(src net.IP, sport, dport uint16) string {
	return fmt.Sprintf("%s:%d>%d", src, sport, dport)
}

// expectSCTP registers a waiter for an SCTP packet; cancel drops it.
func (s *probeServer) expectSCTP(key string) (wait <-chan struct{}, cancel func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.sctp[key] = ch
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		if s.sctp[key] == ch {
			delete(s.sctp, key)
		}
		s.mu.Unlock()
	}
}

func (s *probeServer) close() {
	for _, c := range s.closers {
		_ = c.Close()
	}
}

// probe sends one probe of proto from pod src to dst:port (dst's server
// is srv) and says whether it got through: a TCP connection answered by
// the server, a UDP datagram echoed, an SCTP INIT seen by the server.
func probe(ctx context.Context, l *Lab, src string, srcIP netip.Addr, srv *probeServer, dst netip.Addr, proto string, port int) error {
	switch proto {
	case protoTCP:
		return probeTCP(ctx, l, src, dst, port)
	case protoUDP:
		return probeUDP(l, src, dst, port)
	case protoSCTP:
		return probeSCTP(l, src, srcIP, srv, dst, port)
	}
	return fmt.Errorf("no probe for protocol %q", proto)
}

func probeTCP(ctx context.Context, l *Lab, src string, dst netip.Addr, port int) error {
	var c net.Conn
	d := net.Dialer{Timeout: probeTimeout}
	if err := l.InNamespace(src, func() (err error) {
		c, err = d.DialContext(ctx, "tcp4", netip.AddrPortFrom(dst, uint16(port)).String())
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(probeTimeout))
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return errors.New("the server closed without an answer")
	}
	return nil
}

// probeUDP sends a datagram every 150 ms until the echo comes back or the
// probe times out (a first datagram may wait on neighbour resolution).
func probeUDP(l *Lab, src string, dst netip.Addr, port int) error {
	var c net.Conn
	if err := l.InNamespace(src, func() (err error) {
		c, err = net.Dial("udp4", netip.AddrPortFrom(dst, uint16(port)).String())
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(probeTimeout)
	buf := make([]byte, 100)
	for time.Now().Before(deadline) {
		if _, err := c.Write([]byte("probe")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(minTime(deadline, time.Now().Add(150*time.Millisecond)))
		if _, err := c.Read(buf); err == nil {
			return nil
		} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			return err
		}
	}
	return fmt.Errorf("no echo in %s", probeTimeout)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sctpInit builds an SCTP packet holding one INIT chunk, checksummed
// (CRC32c, stored little-endian as the kernel computes it) so that
// conntrack does not call it invalid.
func sctpInit(sport, dport uint16) []byte {
	pkt := make([]byte, 12+20)
	binary.BigEndian.PutUint16(pkt[0:], sport)
	binary.BigEndian.PutUint16(pkt[2:], dport)
	// Verification tag 0 in an INIT. Chunk: type 1, flags 0, length 20,
	// initiate tag, a_rwnd, outbound and inbound streams, initial TSN.
	pkt[12] = 1
	binary.BigEndian.PutUint16(pkt[14:], 20)
	_, _ = rand.Read(pkt[16:20])
	pkt[16] |= 1 // the initiate tag must not be 0
	binary.BigEndian.PutUint32(pkt[20:], 65535)
	binary.BigEndian.PutUint16(pkt[24:], 1)
	binary.BigEndian.PutUint16(pkt[26:], 1)
	_, _ = rand.Read(pkt[28:32])
	binary.LittleEndian.PutUint32(pkt[8:], crc32.Checksum(pkt, castagnoli))
	return pkt
}

// probeSCTP sends an SCTP INIT from a random source port every 150 ms
// until dst's server sees it or the probe times out.
func probeSCTP(l *Lab, src string, srcIP netip.Addr, srv *probeServer, dst netip.Addr, port int) error {
	var c *net.IPConn
	if err := l.InNamespace(src, func() (err error) {
		c, err = net.ListenIP("ip4:"+strconv.Itoa(ipProtoSCTP), nil)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	var b [2]byte
	_, _ = rand.Read(b[:])
	sport := 10000 + binary.BigEndian.Uint16(b[:])%50000
	seen, cancel := srv.expectSCTP(sctpKey(srcIP.AsSlice(), sport, uint16(port)))
	defer cancel()
	pkt := sctpInit(sport, uint16(port))
	timeout := time.After(probeTimeout)
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := c.WriteToIP(pkt, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return err
		}
		select {
		case <-seen:
			return nil
		case <-timeout:
			return fmt.Errorf("SCTP INIT not seen in %s", probeTimeout)
		case <-tick.C:
		}
	}
}
