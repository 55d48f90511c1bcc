package lab

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	log "github.com/sirupsen/logrus"
)

// A pod's server answers on the ports of `lab pod add --serve`, as the
// upstream network-policy e2e's agnhost does: a TCP connection gets the
// pod's name and the peer address it saw ("ns/pod from 198.19.0.10:40312")
// and is closed, a UDP datagram is answered with it, and an
// SCTP INIT is answered with an INIT-ACK. The kernel here has no SCTP
// stack, so SCTP is served on a raw socket (netfilter still matches and
// tracks SCTP, so policy applies to it).

// ServeEnv, set to a port list ("80/tcp,81/udp"), turns the lab binary
// (or a test binary that calls MaybeSupervise) into a pod's server; the
// pod's name comes from ServeNameEnv.
const (
	ServeEnv     = "PALISADE_LAB_SERVE"
	ServeNameEnv = "PALISADE_LAB_SERVE_NAME"
)

// Protocols a pod serves and probes speak.
const (
	ProtoTCP  = "TCP"
	ProtoUDP  = "UDP"
	ProtoSCTP = "SCTP"
)

// ServePort is one port a pod serves.
type ServePort struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
}

// Name is the container port's name on the Pod, as the upstream e2e
// names them: serve-<port>-<protocol>.
func (p ServePort) Name() string {
	return fmt.Sprintf("serve-%d-%s", p.Port, strings.ToLower(p.Protocol))
}

func (p ServePort) String() string { return fmt.Sprintf("%d/%s", p.Port, strings.ToLower(p.Protocol)) }

// ParseServe reads "80/tcp,81/udp,80/sctp" (a port without a protocol
// is TCP).
func ParseServe(s string) ([]ServePort, error) {
	var out []ServePort
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		num, proto, ok := strings.Cut(f, "/")
		if !ok {
			proto = "tcp"
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("serve %q: port %q is not 1-65535", s, num)
		}
		p, err := ParseProtocol(proto)
		if err != nil {
			return nil, fmt.Errorf("serve %q: %w", s, err)
		}
		sp := ServePort{Port: n, Protocol: p}
		if !slices.Contains(out, sp) {
			out = append(out, sp)
		}
	}
	return out, nil
}

// ParseProtocol reads tcp, udp or sctp (any case).
func ParseProtocol(s string) (string, error) {
	switch p := strings.ToUpper(s); p {
	case ProtoTCP, ProtoUDP, ProtoSCTP:
		return p, nil
	}
	return "", fmt.Errorf("protocol %q: want tcp, udp or sctp", s)
}

// maybeServe runs a pod's server and exits when this process was
// started as one.
func maybeServe() {
	spec := os.Getenv(ServeEnv)
	if spec == "" {
		return
	}
	ports, err := ParseServe(spec)
	if err == nil {
		err = serve(os.Getenv(ServeNameEnv), ports)
	}
	log.WithError(err).Error("pod server stopped")
	os.Exit(1)
}

// serve answers on ports until it fails.
func serve(name string, ports []ServePort) error {
	errc := make(chan error, len(ports)+1)
	var sctp []int
	for _, p := range ports {
		addr := ":" + strconv.Itoa(p.Port)
		switch p.Protocol {
		case ProtoTCP:
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						errc <- err
						return
					}
					// The pod's name, then the peer it saw (a
					// client's own address, or a node's after SNAT).
					_, _ = c.Write([]byte(name + " from " + c.RemoteAddr().String()))
					_ = c.Close()
				}
			}()
		case ProtoUDP:
			c, err := net.ListenPacket("udp", addr)
			if err != nil {
				return err
			}
			go func() {
				buf := make([]byte, 1500)
				for {
					_, from, err := c.ReadFrom(buf)
					if err != nil {
						errc <- err
						return
					}
					_, _ = c.WriteTo([]byte(name), from)
				}
			}()
		case ProtoSCTP:
			sctp = append(sctp, p.Port)
		}
	}
	if len(sctp) > 0 {
		c, err := net.ListenIP("ip4:"+strconv.Itoa(ipProtoSCTP), nil)
		if err != nil {
			return fmt.Errorf("raw SCTP socket: %w", err)
		}
		go func() { errc <- answerSCTP(c, sctp) }()
	}
	log.WithFields(log.Fields{"pod": name, "ports": ports}).Info("pod server answering")
	return <-errc
}

// ipProtoSCTP is SCTP's IP protocol number.
const ipProtoSCTP = 132

// answerSCTP answers every INIT to one of ports with an INIT-ACK.
func answerSCTP(c *net.IPConn, ports []int) error {
	buf := make([]byte, 2048)
	for {
		n, from, err := c.ReadFromIP(buf)
		if err != nil {
			return err
		}
		init, ok := parseSCTP(buf[:n])
		if !ok || init.chunk != sctpChunkInit || !slices.Contains(ports, int(init.dport)) {
			continue
		}
		_, _ = c.WriteToIP(sctpPacket(init.dport, init.sport, init.initiateTag, sctpChunkInitAck), from)
	}
}

// SCTP chunk types.
const (
	sctpChunkInit    = 1
	sctpChunkInitAck = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sctpHeader is what probes and servers read of a packet.
type sctpHeader struct {
	sport, dport uint16
	vtag         uint32
	chunk        byte
	initiateTag  uint32
}

// parseSCTP reads the common header and the first chunk (with its
// initiate tag for INIT and INIT-ACK) of a packet whose IP header is
// already stripped.
func parseSCTP(b []byte) (sctpHeader, bool) {
	if len(b) < 12+4 {
		return sctpHeader{}, false
	}
	h := sctpHeader{sport: binary.BigEndian.Uint16(b), dport: binary.BigEndian.Uint16(b[2:]),
		vtag: binary.BigEndian.Uint32(b[4:]), chunk: b[12]}
	if (h.chunk == sctpChunkInit || h.chunk == sctpChunkInitAck) && len(b) >= 12+8 {
		h.initiateTag = binary.BigEndian.Uint32(b[16:])
	}
	return h, true
}

// sctpPacket builds an INIT (vtag 0) or an INIT-ACK (vtag: the INIT's
// initiate tag, with a small state cookie) with a fresh initiate tag,
// checksummed (CRC32c, stored little-endian as the kernel computes it)
// so that conntrack does not call it invalid. It returns the packet; the
// initiate tag is at bytes 16-19.
func sctpPacket(sport, dport uint16, vtag uint32, chunk byte) []byte {
	size := 12 + 20
	if chunk == sctpChunkInitAck {
		size += 8 // state cookie parameter
	}
	pkt := make([]byte, size)
	binary.BigEndian.PutUint16(pkt[0:], sport)
	binary.BigEndian.PutUint16(pkt[2:], dport)
	binary.BigEndian.PutUint32(pkt[4:], vtag)
	// Chunk: type, flags 0, length, initiate tag, a_rwnd, outbound and
	// inbound streams, initial TSN, then (INIT-ACK) the cookie.
	pkt[12] = chunk
	binary.BigEndian.PutUint16(pkt[14:], uint16(size-12))
	_, _ = rand.Read(pkt[16:20])
	pkt[16] |= 1 // the initiate tag must not be 0
	binary.BigEndian.PutUint32(pkt[20:], 65535)
	binary.BigEndian.PutUint16(pkt[24:], 1)
	binary.BigEndian.PutUint16(pkt[26:], 1)
	_, _ = rand.Read(pkt[28:32])
	if chunk == sctpChunkInitAck {
		binary.BigEndian.PutUint16(pkt[32:], 7) // State Cookie
		binary.BigEndian.PutUint16(pkt[34:], 8)
		_, _ = rand.Read(pkt[36:40])
	}
	binary.LittleEndian.PutUint32(pkt[8:], crc32.Checksum(pkt, castagnoli))
	return pkt
}

var errNoAnswer = errors.New("no answer")
