package lab

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"crypto/rand"
)

// Probe sends one probe from a lab namespace (a node or a pod) to dst on
// port/protocol and says whether it got through: a TCP connection
// answered by the pod's server, a UDP datagram answered, an SCTP INIT
// answered with an INIT-ACK. It gives up after timeout (UDP and SCTP
// resend every 100 ms meanwhile).
func (l *Lab) Probe(ctx context.Context, from string, dst netip.Addr, port int, proto string, timeout time.Duration) error {
	ns, err := l.Target(from)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	target := netip.AddrPortFrom(dst, uint16(port))
	switch proto {
	case ProtoTCP:
		err = probeTCPFrom(ctx, ns, target)
	case ProtoUDP:
		err = probeUDPFrom(ctx, ns, target)
	case ProtoSCTP:
		err = probeSCTPFrom(ctx, ns, target)
	default:
		return fmt.Errorf("protocol %q: want TCP, UDP or SCTP", proto)
	}
	if err != nil {
		return fmt.Errorf("%s → %s %s: %w", from, target, proto, err)
	}
	return nil
}

// probeTCPFrom connects and reads the answer. A connection refused or a
// route missing is tried again every 50 ms until the timeout: the route
// to a new pod, or its server, may be a moment behind.
func probeTCPFrom(ctx context.Context, ns string, dst netip.AddrPort) error {
	var c net.Conn
	for {
		err := inNS(ns, func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", dst.String())
			return err
		})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return fmt.Errorf("connected, but the server closed without an answer")
	}
	return nil
}

func probeUDPFrom(ctx context.Context, ns string, dst netip.AddrPort) error {
	var c net.Conn
	if err := inNS(ns, func() (err error) {
		c, err = net.Dial("udp", dst.String())
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 1500)
	var last error
	for {
		if _, err := c.Write([]byte("probe")); err != nil {
			last = err // no route yet, or a port unreachable came back
			time.Sleep(50 * time.Millisecond)
		} else {
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, err := c.Read(buf)
			if err == nil {
				return nil
			}
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				last = err
				time.Sleep(50 * time.Millisecond)
			}
		}
		if ctx.Err() != nil {
			if last != nil {
				return last
			}
			return errNoAnswer
		}
	}
}

func probeSCTPFrom(ctx context.Context, ns string, dst netip.AddrPort) error {
	var c *net.IPConn
	if err := inNS(ns, func() (err error) {
		c, err = net.ListenIP("ip4:"+strconv.Itoa(ipProtoSCTP), nil)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	var b [2]byte
	_, _ = rand.Read(b[:])
	sport := 10000 + binary.BigEndian.Uint16(b[:])%50000
	pkt := sctpPacket(sport, dst.Port(), 0, sctpChunkInit)
	tag := binary.BigEndian.Uint32(pkt[16:])
	buf := make([]byte, 2048)
	to := &net.IPAddr{IP: dst.Addr().AsSlice()}
	var last error
	for {
		if _, err := c.WriteToIP(pkt, to); err != nil {
			last = err // no route yet
		}
		resend := time.Now().Add(100 * time.Millisecond)
		for time.Now().Before(resend) {
			_ = c.SetReadDeadline(resend)
			n, from, err := c.ReadFromIP(buf)
			if err != nil {
				break
			}
			h, ok := parseSCTP(buf[:n])
			src, _ := netip.AddrFromSlice(from.IP)
			if ok && src.Unmap() == dst.Addr() && h.chunk == sctpChunkInitAck && h.sport == dst.Port() && h.dport == sport && h.vtag == tag {
				return nil
			}
		}
		if ctx.Err() != nil {
			if last != nil {
				return last
			}
			return errNoAnswer
		}
	}
}
