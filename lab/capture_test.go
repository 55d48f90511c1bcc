package lab

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"
)

// How a pod-to-pod packet was seen crossing the fabric.
const (
	seenTunnelled = 1 << iota // inside VXLAN (UDP 4789)
	seenDirect                // as itself, pod addresses outside
)

// capture records, for every pair of addresses in the lab's pools, how
// packets between them crossed the fabric: an AF_PACKET socket on every
// interface of the fabric namespace (each bridge port), so it sees every
// frame between nodes and the router.
type capture struct {
	mu    sync.Mutex
	seen  map[[2]netip.Addr]int
	other int // VXLAN packets to another port, non-pod inner addresses
	vxlan int // VXLAN packets seen
	stop  chan struct{}
	done  chan struct{}
	fd    int
	pools []netip.Prefix
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// startCapture starts capturing on the lab's fabric until stop.
func startCapture(t *testing.T, l *Lab) *capture {
	t.Helper()
	c := &capture{seen: map[[2]netip.Addr]int{}, stop: make(chan struct{}), done: make(chan struct{}),
		pools: []netip.Prefix{netip.MustParsePrefix(l.Options().PoolCIDR), netip.MustParsePrefix(PoolCIDR6)}}
	err := l.InNamespace("fabric", func() error {
		fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(htons(syscall.ETH_P_ALL)))
		c.fd = fd
		return err
	})
	if err != nil {
		t.Fatalf("capture socket in the fabric: %v", err)
	}
	tv := syscall.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	_ = syscall.SetsockoptTimeval(c.fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	_ = syscall.SetsockoptInt(c.fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20)
	go c.run()
	t.Cleanup(c.close)
	return c
}

func (c *capture) run() {
	defer close(c.done)
	buf := make([]byte, 65536)
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		n, _, err := syscall.Recvfrom(c.fd, buf, 0)
		if err != nil {
			continue
		}
		c.frame(buf[:n])
	}
}

// close stops the capture (once).
func (c *capture) close() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	<-c.done
	syscall.Close(c.fd)
}

// ipHeader returns src, dst, the protocol and the payload of an IP packet.
func ipHeader(p []byte) (src, dst netip.Addr, proto byte, payload []byte, ok bool) {
	if len(p) < 20 {
		return
	}
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0xf) * 4
		if len(p) < ihl {
			return
		}
		src, dst = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		return src, dst, p[9], p[ihl:], true
	case 6:
		if len(p) < 40 {
			return
		}
		src, dst = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
		return src, dst, p[6], p[40:], true
	}
	return
}

func (c *capture) inPool(a netip.Addr) bool {
	for _, p := range c.pools {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (c *capture) frame(f []byte) {
	if len(f) < 14 {
		return
	}
	et := binary.BigEndian.Uint16(f[12:14])
	if et != 0x0800 && et != 0x86dd {
		return
	}
	src, dst, proto, payload, ok := ipHeader(f[14:])
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if proto == 17 && len(payload) >= 8+8+14 && binary.BigEndian.Uint16(payload[2:4]) == 4789 {
		c.vxlan++
		inner := payload[8+8:]
		iet := binary.BigEndian.Uint16(inner[12:14])
		if iet != 0x0800 && iet != 0x86dd {
			return
		}
		if is, id, _, _, ok := ipHeader(inner[14:]); ok && c.inPool(is) && c.inPool(id) {
			c.seen[[2]netip.Addr{is, id}] |= seenTunnelled
		} else {
			c.other++
		}
		return
	}
	if c.inPool(src) && c.inPool(dst) {
		c.seen[[2]netip.Addr{src, dst}] |= seenDirect
	}
}

// how reports how packets from a to b were seen.
func (c *capture) how(a, b netip.Addr) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[[2]netip.Addr{a, b}]
}

// seenAll says whether packets of every pair of pods on different nodes
// were seen.
func (c *capture) seenAll(pods []Pod) bool {
	for _, a := range pods {
		for _, b := range pods {
			if a.Node != b.Node && c.how(a.IP, b.IP) == 0 {
				return false
			}
		}
	}
	return true
}

// reset forgets what was seen.
func (c *capture) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.seen)
	c.vxlan, c.other = 0, 0
}
