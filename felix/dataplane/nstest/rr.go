package nstest

import (
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// Echo serves one-byte request/response exchanges on addr (":port" for
// every address) in run's namespace until the listener is closed.
func Echo(run *nsexec.Runner, addr string) (net.Listener, error) {
	var l net.Listener
	if err := run.Do(func() error {
		var err error
		l, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l, nil
}

// RR runs one-byte request/response exchanges from run's namespace to
// dst for d, on one connection or, with perConn, on a new connection
// each (connect-request-response), and returns their rate per second.
func RR(run *nsexec.Runner, dst netip.AddrPort, d time.Duration, perConn bool) (float64, error) {
	dial := func() (net.Conn, error) {
		var c net.Conn
		err := run.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp4", dst.String(), time.Second)
			return err
		})
		return c, err
	}
	buf := []byte{'x'}
	exchange := func(c net.Conn) error {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	}
	var c net.Conn
	var err error
	if !perConn {
		if c, err = dial(); err != nil {
			return 0, err
		}
		defer c.Close()
	}
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if perConn {
			if c, err = dial(); err != nil {
				return 0, err
			}
		}
		err = exchange(c)
		if perConn {
			c.Close()
		}
		if err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
