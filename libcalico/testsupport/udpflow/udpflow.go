// Package udpflow counts numbered UDP datagrams sent from one socket to
// another, for tests that measure what a restart or a failover loses.
// The caller opens the sockets (in whatever namespaces it needs); a
// datagram's first four bytes are its sequence number, big-endian.
package udpflow

import (
	"encoding/binary"
	"net"
	"sync"
	"time"
)

// maxLost is the most lost sequence numbers Lost lists.
const maxLost = 20

// Receiver records the sequence numbers arriving on a socket.
type Receiver struct {
	rc       *net.UDPConn
	mu       sync.Mutex
	received map[uint32]bool
	done     chan struct{}
}

// Receive reads rc until Close.
func Receive(rc *net.UDPConn) *Receiver {
	r := &Receiver{rc: rc, received: map[uint32]bool{}, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]byte, 64)
		for {
			n, err := rc.Read(buf)
			if err != nil {
				return
			}
			if n >= 4 {
				r.mu.Lock()
				r.received[binary.BigEndian.Uint32(buf)] = true
				r.mu.Unlock()
			}
		}
	}()
	return r
}

// Count is how many distinct sequence numbers arrived.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.received)
}

// Close closes the socket and waits for the reader to end.
func (r *Receiver) Close() {
	r.rc.Close()
	<-r.done
}

// Lost lists the sequence numbers below sent that did not arrive (at
// most 20).
func (r *Receiver) Lost(sent int) []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lost []uint32
	for i := 0; i < sent && len(lost) < maxLost; i++ {
		if !r.received[uint32(i)] {
			lost = append(lost, uint32(i))
		}
	}
	return lost
}

// Send writes datagram seq of size bytes (at least 4) to sc.
func Send(sc *net.UDPConn, seq uint32, size int) error {
	buf := make([]byte, max(size, 4))
	binary.BigEndian.PutUint32(buf, seq)
	_, err := sc.Write(buf)
	return err
}

// Flow sends datagrams 0, 1, 2… one each interval from sc to rc until
// Stop.
type Flow struct {
	recv *Receiver
	mu   sync.Mutex
	sent int
	stop chan struct{}
	once sync.Once
	done chan struct{}
}

// Start starts a flow of size-byte datagrams from sc to rc; the flow
// owns both sockets and closes them when stopped.
func Start(rc, sc *net.UDPConn, interval time.Duration, size int) *Flow {
	f := &Flow{recv: Receive(rc), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer sc.Close()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := uint32(0); ; i++ {
			select {
			case <-f.stop:
				// The last datagrams get a second to arrive.
				time.Sleep(time.Second)
				f.recv.Close()
				return
			case <-tick.C:
			}
			_ = Send(sc, i, size)
			f.mu.Lock()
			f.sent++
			f.mu.Unlock()
		}
	}()
	return f
}

// Stop stops sending, waits a second for the last datagrams, and returns
// the sequence numbers lost (at most 20) and how many were sent. Calling
// it again returns the same.
func (f *Flow) Stop() (lost []uint32, sent int) {
	f.once.Do(func() { close(f.stop) })
	<-f.done
	f.mu.Lock()
	sent = f.sent
	f.mu.Unlock()
	return f.recv.Lost(sent), sent
}
