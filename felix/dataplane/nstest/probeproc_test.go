package nstest

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// TestProberSaysWhyItFailed checks that a prober process that fails
// gives its reason to the test: its error, written to its standard
// error, once lost behind "reading the prober: EOF". Before it is ready
// (an IPv6 destination) and after it was told to go (a namespace with no
// route: its first connect fails with ENETUNREACH).
func TestProberSaysWhyItFailed(t *testing.T) {
	RequireRoot(t)
	ns := New(t, Prefix(), "probe")
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	_, err = StartProber(run, netip.MustParseAddrPort("[2001:db8::1]:80"), time.Second)
	if err == nil || !strings.Contains(err.Error(), "IPv4 only") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("a prober failing before ready: got %v, want its reason (IPv4 only) and exit status", err)
	}
	p, err := StartProber(run, netip.MustParseAddrPort("198.18.0.1:80"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Go(); err != nil {
		t.Fatal(err)
	}
	_, ok, err := p.Opened()
	if ok || err == nil || !strings.Contains(err.Error(), "network is unreachable") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("a prober failing after go: got ok %v, %v; want its reason (network is unreachable) and exit status", ok, err)
	}
	t.Log(err)
}
