package nstest

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// TestServerCloseStopsSCTPReader checks that Close leaves no reader on
// the server's raw SCTP socket: the next socket opened, which the kernel
// gives the same descriptor number, gets its own data. (A reader left
// spinning on a shut-down socket once took a TCP probe's reply this way.)
func TestServerCloseStopsSCTPReader(t *testing.T) {
	RequireRoot(t)
	ns := New(t, Prefix(), "srv")
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	for i := 0; i < 50; i++ {
		s, err := Serve(run) // no ports: only the raw SCTP socket
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err := run.Do(func() error { return selfDatagram() }); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
}

// selfDatagram sends a datagram from a new UDP socket on lo to itself and
// reads it back.
func selfDatagram() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	self, err := syscall.Getsockname(fd)
	if err != nil {
		return err
	}
	tv := syscall.NsecToTimeval((500 * time.Millisecond).Nanoseconds())
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	if err := syscall.Sendto(fd, []byte("probe"), 0, self); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	n = max(n, 0)
	if err != nil || string(buf[:n]) != "probe" {
		return fmt.Errorf("a socket on descriptor %d did not get its own datagram (%q, %v): a reader of a closed server holds it", fd, buf[:n], err)
	}
	return nil
}
