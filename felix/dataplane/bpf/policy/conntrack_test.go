package policy

import (
	"testing"
	"time"

	"github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// TestConntrackTimeouts: a flow a policy allowed stays allowed after the
// policy changes to deny (established, as with iptables) until its entry
// times out; then the packet meets the new policy. A reply is established
// from the first packet on; a TCP SYN on a tuple whose flow was reset is a
// new connection.
func TestConntrackTimeouts(t *testing.T) {
	e := newBedWith(t, bpf.Timeouts{UDP: time.Second})
	allow := e.load(Input{Final: true, Profiles: []Profile{{Name: "all", Rules: []calc.Rule{{Action: calc.Allow}}}}})
	deny := e.load(Input{Final: true})
	set := func(slot uint32) {
		e.endpoint(e.a, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: slot, bpf.StageNormalOut: slot}, "10.0.0.1/32")
	}
	req := udp("10.0.0.1", "10.0.0.2", 53)
	reply := packet{src: "10.0.0.2", dst: "10.0.0.1", proto: 17, sport: 53, dport: 40000}

	set(allow)
	if v, _ := e.send(false, bpf.In, e.a, 0, req.bytes()); v != -1 {
		t.Fatalf("allowed by policy: verdict %d", v)
	}
	set(deny)
	if v, _ := e.send(false, bpf.In, e.a, 0, req.bytes()); v != -1 {
		t.Errorf("established flow after the policy changed: verdict %d, want allowed", v)
	}
	// The reply, arriving from elsewhere, goes out to the workload.
	if v, _ := e.send(false, bpf.Out, e.a, e.b, reply.bytes()); v != -1 {
		t.Errorf("reply of an established flow: verdict %d, want allowed", v)
	}
	if v, _ := e.send(false, bpf.In, e.a, 0, udp("10.0.0.1", "10.0.0.2", 54).bytes()); v != 2 {
		t.Errorf("a new flow under the deny policy: verdict %d", v)
	}
	time.Sleep(1200 * time.Millisecond)
	if v, _ := e.send(false, bpf.In, e.a, 0, req.bytes()); v != 2 {
		t.Errorf("after the UDP timeout: verdict %d, want denied", v)
	}

	// TCP: a reset closes the flow; a new SYN on it meets policy.
	set(allow)
	syn := tcp("10.0.0.1", "10.0.0.2", 80)
	if v, _ := e.send(false, bpf.In, e.a, 0, syn.bytes()); v != -1 {
		t.Fatalf("SYN allowed by policy: verdict %d", v)
	}
	set(deny)
	rst := syn
	rst.tcpFlags = 0x04
	if v, _ := e.send(false, bpf.In, e.a, 0, rst.bytes()); v != -1 {
		t.Errorf("RST of an established flow: verdict %d", v)
	}
	if v, _ := e.send(false, bpf.In, e.a, 0, syn.bytes()); v != 2 {
		t.Errorf("new SYN on a reset flow under the deny policy: verdict %d, want denied", v)
	}
}

// ctEntries reads the conntrack map.
func (e *bed) ctEntries() map[bpf.CTKey]bpf.CTValue {
	e.t.Helper()
	out := map[bpf.CTKey]bpf.CTValue{}
	var k bpf.CTKey
	var v bpf.CTValue
	it := e.objs.Maps[bpf.MapCT].Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestConntrackRefresh: a packet of an established flow rewrites its
// entry only when the TCP state changes or its last_seen lags by more
// than the refresh interval (a sixteenth of the timeout, at most a
// second), so a busy flow does not write its entry on every packet; a
// state change is written at once and its timeout counts from it.
func TestConntrackRefresh(t *testing.T) {
	e := newBedWith(t, bpf.Timeouts{UDP: 800 * time.Millisecond})
	allow := e.load(Input{Final: true, Profiles: []Profile{{Name: "all", Rules: []calc.Rule{{Action: calc.Allow}}}}})
	e.endpoint(e.a, bpf.EndpointWorkload, map[int]uint32{bpf.StageNormalIn: allow, bpf.StageNormalOut: allow}, "10.0.0.1/32")
	only := func() (bpf.CTKey, bpf.CTValue) {
		t.Helper()
		es := e.ctEntries()
		if len(es) != 1 {
			t.Fatalf("%d conntrack entries, want 1: %v", len(es), es)
		}
		for k, v := range es {
			return k, v
		}
		panic("unreachable")
	}
	syn := tcp("10.0.0.1", "10.0.0.2", 80)
	if v, _ := e.send(false, bpf.In, e.a, 0, syn.bytes()); v != -1 {
		t.Fatalf("SYN: verdict %d", v)
	}
	_, first := only()
	// Same state, well within a second: the entry is not written.
	ack := syn
	ack.tcpFlags = tcpACK
	for range 3 {
		if v, _ := e.send(false, bpf.In, e.a, 0, ack.bytes()); v != -1 {
			t.Fatalf("ACK of the flow: verdict %d", v)
		}
	}
	if _, v := only(); v != first {
		t.Errorf("entry rewritten by packets that changed nothing: %+v, was %+v", v, first)
	}
	// The reply changes the state (reply seen): written at once.
	reply := packet{src: "10.0.0.2", dst: "10.0.0.1", proto: 6, sport: 80, dport: syn.sport, tcpFlags: tcpSYN | tcpACK}
	if v, _ := e.send(false, bpf.Out, e.a, e.b, reply.bytes()); v != -1 {
		t.Fatalf("reply: verdict %d", v)
	}
	if _, v := only(); v.Flags&0x02 == 0 || v.LastSeen < first.LastSeen {
		t.Errorf("reply not recorded: %+v", v)
	}
	// A FIN is recorded at once too.
	fin := ack
	fin.tcpFlags = tcpACK | 0x01
	if v, _ := e.send(false, bpf.In, e.a, 0, fin.bytes()); v != -1 {
		t.Fatalf("FIN: verdict %d", v)
	}
	if _, v := only(); v.Flags&0x04 == 0 && v.Flags&0x08 == 0 {
		t.Errorf("FIN not recorded: %+v", v)
	}

	// UDP, timeout 800 ms: refreshed once it lags by more than 50 ms,
	// so a flow with a packet every 100 ms never expires.
	e.clearCT()
	req := udp("10.0.0.1", "10.0.0.2", 53)
	start := time.Now()
	for time.Since(start) < 1500*time.Millisecond {
		if v, _ := e.send(false, bpf.In, e.a, 0, req.bytes()); v != -1 {
			t.Fatalf("UDP flow with a packet every 100 ms expired after %s: verdict %d", time.Since(start).Round(time.Millisecond), v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
