package nstest

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// PingDF sends one ICMP echo request of size bytes in all (IPv4 header
// included) with Don't Fragment set from run's namespace to dst and waits
// for the reply: it proves the path carries packets that large unsplit. A
// path MTU too small fails the send (EMSGSIZE) or loses the packet.
func PingDF(run *nsexec.Runner, dst netip.Addr, size int, timeout time.Duration) error {
	if size < 28 {
		return fmt.Errorf("ping of %d bytes: at least 28", size)
	}
	fd, err := rawICMP(run)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IP, syscall.IP_MTU_DISCOVER, syscall.IP_PMTUDISC_PROBE); err != nil {
		return fmt.Errorf("setting DF: %w", err)
	}
	id := uint16(time.Now().UnixNano())
	msg := make([]byte, size-20)
	msg[0] = 8
	binary.BigEndian.PutUint16(msg[4:], id)
	binary.BigEndian.PutUint16(msg[6:], 1)
	binary.BigEndian.PutUint16(msg[2:], Checksum(msg))
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrInet4{Addr: dst.As4()}); err != nil {
		return fmt.Errorf("sending %d bytes with DF to %s: %w", size, dst, err)
	}
	n, err := awaitEcho(fd, dst, id, timeout)
	if err != nil {
		return fmt.Errorf("%d bytes with DF: %w", size, err)
	}
	if n != size {
		return fmt.Errorf("echo reply from %s has %d bytes, sent %d", dst, n, size)
	}
	return nil
}
