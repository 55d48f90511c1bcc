package felix

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/dataplane/nstest"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// syncBuffer is a log output shared by two loggers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// since returns the lines written after offset mark.
func (b *syncBuffer) since(mark int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()[mark:]
}

func (b *syncBuffer) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// felixLines keeps felix's own lines (part=felix) at a level.
func felixLines(out, level string) []string {
	var l []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "part=felix") && strings.Contains(line, "level="+level+" ") {
			l = append(l, line)
		}
	}
	return l
}

// TestLogSeverityScreen: felix logs through the output and format of the
// logger it is given, at the level of FelixConfiguration's
// logSeverityScreen, whatever that logger's own level.
func TestLogSeverityScreen(t *testing.T) {
	nstest.RequireRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	store := etcdtest.NewStore(t, etcdtest.Start(t))
	node := nstest.New(t, nstest.Prefix(), "node")
	for _, l := range []string{"eth-a", "eth-b"} {
		node.MustRun(t, "ip", "link", "add", l, "type", "veth", "peer", "name", l+"-peer")
	}
	c := &cluster{t: t, ctx: ctx, store: store, node: node, save: "iptables-nft-save"}
	felixConfig := func(extra string) {
		c.apply(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  iptablesBackend: NFT
  ipv6Support: false
` + extra)
	}
	hep := func(iface string) []v3.Resource {
		return c.apply(`apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-a-` + iface + `}
spec: {node: node-a, interfaceName: ` + iface + `}
`)
	}
	chain := func(name string, present bool) {
		c.waitFor(name+" present="+map[bool]string{true: "true", false: "false"}[present], func() bool {
			return strings.Contains(c.filter(), ":"+name+" ") == present
		})
	}
	felixConfig("")

	out := &syncBuffer{}
	base := log.New()
	base.Out = out
	base.Formatter = &log.TextFormatter{DisableTimestamp: true, DisableColors: true}
	// The logger handed in is at Debug: felix's level is its own.
	base.Level = log.DebugLevel
	runFelix(t, ctx, cancel, Config{NodeName: nodeName, Store: store, NetNS: node.Path(), Log: base.WithField("test", t.Name())})

	// Default (Info): felix writes tables without its debug line.
	hep("eth-a")
	chain("cali-fh-eth-a", true)
	all := out.since(0)
	if len(felixLines(all, "info")) == 0 || !strings.Contains(all, "test=TestLogSeverityScreen") || strings.Contains(all, "time=") {
		t.Fatalf("felix's info lines are not in the given logger's output, fields and format:\n%s", all)
	}
	if d := felixLines(all, "debug"); len(d) > 0 {
		t.Errorf("logSeverityScreen Info (default): felix logged debug lines:\n%s", strings.Join(d, "\n"))
	}
	base.Debug("the given logger is at debug")
	if !strings.Contains(out.since(0), "the given logger is at debug") {
		t.Fatal("the given logger does not log debug: the test proves nothing")
	}

	// Debug: the same kind of change now logs felix's debug lines.
	felixConfig("  logSeverityScreen: Debug\n")
	// The first configuration (Info) logged a change too: wait for this one.
	c.waitFor("felix's level changed", func() bool {
		return strings.Contains(out.since(0), `msg="Log level changed" logSeverityScreen=Debug`)
	})
	mark := out.len()
	hep("eth-b")
	chain("cali-fh-eth-b", true)
	c.waitFor("felix's debug line of a table write", func() bool {
		for _, l := range felixLines(out.since(mark), "debug") {
			if strings.Contains(l, `msg="Table written"`) {
				return true
			}
		}
		return false
	})

	// Warning: neither debug nor info. The same write changes the
	// endpoint-to-host action, so its arrival is visible in the kernel.
	felixConfig("  logSeverityScreen: Warning\n  defaultEndpointToHostAction: Accept\n")
	c.waitFor("the configuration applied", func() bool {
		return strings.Contains(c.filter(), "DefaultEndpointToHostAction\" -j ACCEPT")
	})
	mark = out.len()
	c.remove(hep("eth-b"))
	chain("cali-fh-eth-b", false)
	time.Sleep(100 * time.Millisecond)
	since := out.since(mark)
	if l := append(felixLines(since, "debug"), felixLines(since, "info")...); len(l) > 0 {
		t.Errorf("logSeverityScreen Warning: felix logged below warning:\n%s", strings.Join(l, "\n"))
	}
}
