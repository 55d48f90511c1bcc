package reflector

import (
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dialControl sets what a client session's socket needs before it
// connects: the TCP MD5 signature key for the peer (RFC 2385), as
// GoBGP and BIRD set it for a BGP password.
func dialControl(peer netip.Addr, password string) func(network, address string, c syscall.RawConn) error {
	if password == "" {
		return nil
	}
	return func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = setMD5(int(fd), peer, password) })
		if err != nil {
			return err
		}
		return serr
	}
}

func setMD5(fd int, peer netip.Addr, key string) error {
	if len(key) > unix.TCP_MD5SIG_MAXKEYLEN {
		return fmt.Errorf("the BGP password is longer than %d bytes", unix.TCP_MD5SIG_MAXKEYLEN)
	}
	sig := unix.TCPMD5Sig{Keylen: uint16(len(key))}
	copy(sig.Key[:], key)
	if peer.Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sig.Addr))
		sa.Family = unix.AF_INET
		sa.Addr = peer.As4()
	} else {
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&sig.Addr))
		sa.Family = unix.AF_INET6
		sa.Addr = peer.As16()
	}
	if err := unix.SetsockoptTCPMD5Sig(fd, unix.IPPROTO_TCP, unix.TCP_MD5SIG, &sig); err != nil {
		return fmt.Errorf("setting the TCP MD5 password: %w", err)
	}
	return nil
}
