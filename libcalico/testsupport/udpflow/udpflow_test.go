package udpflow

import (
	"net"
	"slices"
	"testing"
	"time"
)

func loopback(t *testing.T) (rc, sc *net.UDPConn) {
	t.Helper()
	rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	sc, err = net.DialUDP("udp4", nil, rc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		rc.Close()
		t.Fatal(err)
	}
	return rc, sc
}

// TestFlowOnLoopback: nothing is lost on loopback, and a second Stop
// returns the same.
func TestFlowOnLoopback(t *testing.T) {
	rc, sc := loopback(t)
	f := Start(rc, sc, 5*time.Millisecond, 16)
	time.Sleep(200 * time.Millisecond)
	lost, sent := f.Stop()
	if sent < 10 || len(lost) > 0 {
		t.Fatalf("sent %d, lost %v", sent, lost)
	}
	if lost2, sent2 := f.Stop(); sent2 != sent || len(lost2) != 0 {
		t.Fatalf("second Stop: sent %d lost %v, first sent %d", sent2, lost2, sent)
	}
}

// TestReceiverLost: the sequence numbers that were not sent are the
// lost ones, the first 20 of them.
func TestReceiverLost(t *testing.T) {
	rc, sc := loopback(t)
	defer sc.Close()
	r := Receive(rc)
	for _, seq := range []uint32{0, 2, 4} {
		if err := Send(sc, seq, 8); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); r.Count() < 3 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	r.Close()
	if got := r.Lost(6); !slices.Equal(got, []uint32{1, 3, 5}) {
		t.Fatalf("Lost(6) = %v, want [1 3 5]", got)
	}
	if got := r.Lost(100); len(got) != 20 || got[0] != 1 {
		t.Fatalf("Lost(100) = %v, want 20 starting at 1", got)
	}
}
