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
