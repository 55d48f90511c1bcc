package lab

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// flow counts the numbered UDP datagrams one pod sends another at a fixed
// rate until stopped.
type flow struct {
	name     string
	mu       sync.Mutex
	sent     int
	received map[uint32]bool
	stop     chan struct{}
	done     chan struct{}
}

// startFlow sends rate datagrams a second from src to dst's port until
// stopFlow.
func startFlow(t testing.TB, l *Lab, src, dst Pod, port, rate int) *flow {
	t.Helper()
	f := &flow{name: src.Key() + "→" + dst.Key(), received: map[uint32]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	var rc, sc *net.UDPConn
	if err := l.InNamespace(dst.Key(), func() (err error) {
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: dst.IP.AsSlice(), Port: port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.InNamespace(src.Key(), func() (err error) {
		sc, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: dst.IP.AsSlice(), Port: port})
		return err
	}); err != nil {
		rc.Close()
		t.Fatal(err)
	}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		buf := make([]byte, 64)
		for {
			n, err := rc.Read(buf)
			if err != nil {
				return
			}
			if n >= 4 {
				f.mu.Lock()
				f.received[binary.BigEndian.Uint32(buf)] = true
				f.mu.Unlock()
			}
		}
	}()
	go func() {
		defer close(f.done)
		defer sc.Close()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		buf := make([]byte, 32)
		for i := uint32(0); ; i++ {
			select {
			case <-f.stop:
				// The last datagrams get a second to arrive.
				time.Sleep(time.Second)
				rc.Close()
				<-recvDone
				return
			case <-tick.C:
			}
			binary.BigEndian.PutUint32(buf, i)
			_, _ = sc.Write(buf)
			f.mu.Lock()
			f.sent++
			f.mu.Unlock()
		}
	}()
	return f
}

// stopFlow stops sending and returns the sequence numbers lost (at most
// 20) and how many were sent.
func (f *flow) stopFlow() (lost []uint32, sent int) {
	close(f.stop)
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 0; i < f.sent; i++ {
		if !f.received[uint32(i)] && len(lost) < 20 {
			lost = append(lost, uint32(i))
		}
	}
	return lost, f.sent
}

// TestAgentRestart: in a full mesh and with calico-nodes as in-cluster
// route reflectors (two, as Calico advises), calico-node is killed (-9)
// twice back to back on one node, then stopped (SIGTERM) on another, while
// UDP flows run between pods of every pair of nodes. Every time, every BGP session is
// Established again within seconds, and no datagram is lost: the peers
// keep the restarting node's routes (graceful restart) and it keeps
// theirs in its kernel.
func TestAgentRestart(t *testing.T) {
	for _, peering := range []string{PeeringMesh, PeeringNodeRR} {
		t.Run(peering, func(t *testing.T) {
			nodes := 3
			if peering == PeeringNodeRR {
				nodes = 4 // two reflectors, two clients
			}
			l := newLab(t, Options{Nodes: nodes, Peering: peering, Etcd: EtcdExternal})
			ctx := context.Background()
			pods := addPods(t, l, "restart", 1)
			requireReachable(t, l, "before the restarts")
			var flows []*flow
			port := 7100
			for _, a := range pods {
				for _, b := range pods {
					if a.Node != b.Node {
						flows = append(flows, startFlow(t, l, a, b, port, 50))
						port++
					}
				}
			}
			time.Sleep(time.Second)
			// Killed twice back to back, then another node stopped: in the
			// mesh a node then the lowest-addressed one (which only ever
			// accepts), with reflectors a reflector then a client.
			first, second := "node3", "node1"
			if peering == PeeringNodeRR {
				first, second = "node1", "node3"
			}
			steps := []struct {
				node string
				sig  syscall.Signal
			}{
				{first, syscall.SIGKILL}, {first, syscall.SIGKILL}, {second, syscall.SIGTERM},
			}
			for _, s := range steps {
				d, err := l.RestartAgent(ctx, s.node, s.sig, 60*time.Second)
				if err != nil {
					t.Fatalf("%s of calico-node on %s: %v", s.sig, s.node, err)
				}
				t.Logf("%s of calico-node on %s: every session Established again after %s", s.sig, s.node, d.Round(10*time.Millisecond))
				if d > 20*time.Second {
					t.Errorf("%s of calico-node on %s: sessions took %s to come back", s.sig, s.node, d)
				}
			}
			time.Sleep(2 * time.Second)
			for _, f := range flows {
				lost, sent := f.stopFlow()
				if len(lost) > 0 {
					t.Errorf("%s: lost datagrams %v… of %d", f.name, lost, sent)
				}
			}
		})
	}
}
