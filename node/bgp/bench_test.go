package bgp_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

const benchPrefixes = 10000

// benchPrefix is the i-th /26 in 10.0.0.0/8.
func benchPrefix(i int) string {
	n := i << 6
	return fmt.Sprintf("10.%d.%d.%d/26", n>>16&255, n>>8&255, n&255)
}

// countRoutes counts a namespace's routes of protocol proto.
func countRoutes(ns, proto string) int {
	out, _ := exec.Command("ip", "-n", ns, "route", "show", "proto", proto).Output()
	return strings.Count(string(out), "\n")
}

// waitCount waits until ns has n routes of proto and returns when.
func waitCount(b *testing.B, ns, proto string, n int) time.Time {
	deadline := time.Now().Add(50 * time.Second)
	for time.Now().Before(deadline) {
		if c := countRoutes(ns, proto); c >= n {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("%s: fewer than %d routes of proto %s (have %d)", ns, n, proto, countRoutes(ns, proto))
	return time.Time{}
}

// BenchmarkRR10k: 10,000 prefixes originated by one node, reflected by a
// route reflector and installed in a receiving node's kernel; our nodes in
// all three roles against BIRD 2 in the same roles, same topology, same
// run. Timed from the origin's start.
func BenchmarkRR10k(b *testing.B) {
	var ours, ref time.Duration
	for b.Loop() {
		ours += runOurs(b)
		ref += runBird(b)
	}
	b.ReportMetric(ours.Seconds()/float64(b.N), "s/ours")
	b.ReportMetric(ref.Seconds()/float64(b.N), "s/bird")
	b.ReportMetric(ours.Seconds()/ref.Seconds(), "x/ref")
}

func runOurs(b *testing.B) time.Duration {
	f := newFabric(b)
	ctx := context.Background()
	f.apply(&v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "big"}, Spec: v3.IPPoolSpec{CIDR: "10.0.0.0/8", BlockSize: 26}})
	off := false
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "peer-with-rr"}, Spec: v3.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "has(routeReflector)"}})
	f.node("rr", "198.18.0.11/24", func(n *v3.Node) {
		n.Labels = map[string]string{"routeReflector": "true"}
		n.Spec.BGP.RouteReflectorClusterID = "224.0.0.1"
	})
	f.node("origin", "198.18.0.1/24", nil)
	f.node("recv", "198.18.0.2/24", nil)
	kv := f.store.KV()
	for i := 0; i < benchPrefixes; i++ {
		key := datastore.IPAMPrefix + "host/origin/ipv4/block/" + strings.Replace(benchPrefix(i), "/", "-", 1)
		if _, err := kv.Create(ctx, datastore.KVPair{Key: key, Value: []byte(`{"state":"confirmed","deleted":false}`)}); err != nil {
			b.Fatal(err)
		}
	}
	f.start("rr")
	f.start("recv")
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	f.start("origin")
	end := waitCount(b, f.ns["recv"], proto, benchPrefixes)
	return end.Sub(start)
}

func runBird(b *testing.B) time.Duration {
	f := newFabric(b)
	var static strings.Builder
	static.WriteString("protocol static { ipv4;\n")
	for i := 0; i < benchPrefixes; i++ {
		fmt.Fprintf(&static, "  route %s blackhole;\n", benchPrefix(i))
	}
	static.WriteString("}\n")
	common := "protocol device { }\nprotocol direct { ipv4; interface \"eth0\"; }\n"
	f.startBird("rr", "198.18.0.11/24", bird2Bin, bird2Ctl, "router id 198.18.0.11;\n"+common+
		"template bgp c { local 198.18.0.11 as 64512; rr client; rr cluster id 224.0.0.1; ipv4 { import all; export all; }; }\n"+
		"protocol bgp origin from c { neighbor 198.18.0.1 as 64512; }\nprotocol bgp recv from c { neighbor 198.18.0.2 as 64512; }\n")
	recv := f.startBird("recv", "198.18.0.2/24", bird2Bin, bird2Ctl, "router id 198.18.0.2;\n"+common+
		"protocol kernel { ipv4 { import none; export filter { if source = RTS_DEVICE then reject; accept; }; }; }\n"+
		"protocol bgp reflector { local 198.18.0.2 as 64512; neighbor 198.18.0.11 as 64512; ipv4 { import all; export none; }; }\n")
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	f.startBird("origin", "198.18.0.1/24", bird2Bin, bird2Ctl, "router id 198.18.0.1;\n"+common+static.String()+
		"protocol bgp reflector { local 198.18.0.1 as 64512; neighbor 198.18.0.11 as 64512; ipv4 { import none; export all; }; }\n")
	end := waitCount(b, recv.ns, "bird", benchPrefixes)
	return end.Sub(start)
}
