package lab

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/testsupport/udpflow"
)

// flow is a UDP flow from one pod to another.
type flow struct {
	name string
	*udpflow.Flow
}

// startFlow sends rate datagrams a second from src to dst's port until
// Stop.
func startFlow(t testing.TB, l *Lab, src, dst Pod, port, rate int) flow {
	t.Helper()
	rc, sc := podUDP(t, l, src, dst, port)
	return flow{name: src.Key() + "→" + dst.Key(), Flow: udpflow.Start(rc, sc, time.Second/time.Duration(rate), 32)}
}

// podUDP opens a UDP socket on dst's port in dst's namespace and one
// connected to it in src's.
func podUDP(t testing.TB, l *Lab, src, dst Pod, port int) (rc, sc *net.UDPConn) {
	t.Helper()
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
	return rc, sc
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
			var flows []flow
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
				lost, sent := f.Stop()
				if len(lost) > 0 {
					t.Errorf("%s: lost datagrams %v… of %d", f.name, lost, sent)
				}
			}
		})
	}
}
