package calc

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Reference figures of Calico's felix for BenchmarkSnapshot200Local250kTotal10000TagPols
// on this machine.
const (
	refSeconds = 6.65
	refPeakMB  = 1.42 * 1024
)

// markerLabels are the tag-like labels policies select on: thirty of
// them, one duplicated, as in Calico's benchmark.
func markerLabels() []string {
	return []string{
		"FOO_BAR", "FOO_BAR", "BIFF_BOP", "calico/FizzBuzz", "calico/BoffBip", "calico/Bazzle", "calico/Razzle",
		"calico/DoopDeeDoo", "calico/SOME_LABEL", "calico/BORED_NOW", "MyMarkerLabel",
		"xFOO_BAR", "xBIFF_BOP", "xcalico/FizzBuzz", "xcalico/BoffBip", "xcalico/Bazzle", "xcalico/Razzle",
		"xcalico/DoopDeeDoo", "xcalico/SOME_LABEL", "xcalico/BORED_NOW",
		"yxMyMarkerLabel", "yxFOO_BAR", "yxBIFF_BOP", "yxcalico/FizzBuzz", "yxcalico/BoffBip", "yxcalico/Bazzle",
		"yxcalico/Razzle", "yxcalico/DoopDeeDoo", "yxcalico/SOME_LABEL", "yxcalico/BORED_NOW", "yxMyMarkerLabel",
	}
}

// snapshot builds the scenario of Calico's
// BenchmarkSnapshot200Local250kTotal10000TagPols: 10,000 global policies in
// the default tier, each selecting has(<marker>) with five rules allowing
// from has(<marker>); 100 namespaces whose kns. profiles carry the
// namespace name label; 250,000 remote and 200 local workload endpoints
// with five "one-in-N" labels and one marker.
type snapshot struct {
	policies, profiles, remote, local []Update
}

func makeSnapshot(numRemote, numLocal, numPols int) *snapshot {
	markers := markerLabels()
	s := &snapshot{}
	for i := range numPols {
		p := gnp(fmt.Sprintf("tag-pol-%d", i), fmt.Sprintf("has(%s)", markers[i%len(markers)]), nil)
		p.Spec.Tier = "default"
		for j := range 5 {
			p.Spec.Ingress = append(p.Spec.Ingress, allowFrom(v3.EntityRule{Selector: fmt.Sprintf("has(%s)", markers[(i+j)%len(markers)])}))
		}
		s.policies = append(s.policies, up(p))
	}
	for i := range 100 {
		name := fmt.Sprintf("namespace-%d", i)
		s.profiles = append(s.profiles, up(&v3.Profile{TypeMeta: v3.TypeMeta{Kind: v3.KindProfile}, ObjectMeta: v3.ObjectMeta{Name: "kns." + name},
			Spec: v3.ProfileSpec{LabelsToApply: map[string]string{"pcns.projectcalico.org/name": name}}}))
	}
	ip := uint32(0x0a000001)
	seed := 0
	eps := func(n int, node string) []Update {
		out := make([]Update, n)
		for i := range n {
			seed++
			labels := map[string]string{}
			for _, m := range []int{10, 11, 20, 30, 40} {
				labels["one-in-"+strconv.Itoa(m)] = "value-" + strconv.Itoa(seed%m)
			}
			labels[markers[seed%len(markers)]] = "true"
			a := netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)})
			ip++
			ns := fmt.Sprintf("namespace-%d", i%100)
			w := &v3.WorkloadEndpoint{
				TypeMeta:   v3.TypeMeta{Kind: v3.KindWorkloadEndpoint},
				ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("%s-k8s-wep--%d-eth0", node, i), Namespace: ns, Labels: labels},
				Spec: v3.WorkloadEndpointSpec{Node: node, IPNetworks: []string{a.String() + "/32"},
					InterfaceName: fmt.Sprintf("cali%011d", i), Profiles: []string{"kns." + ns}},
			}
			out[i] = Update{Key: datastore.KeyOf(w), Value: w}
		}
		return out
	}
	s.remote = eps(numRemote, "remotehost")
	s.local = eps(numLocal, "localhost")
	return s
}

// counter is a Dataplane that only counts.
type counter struct{ sets, policies, endpoints, msgs int }

func (c *counter) OnConfigUpdate(*Config)                  { c.msgs++ }
func (c *counter) OnIPSetUpdate(*IPSet)                    { c.msgs++; c.sets++ }
func (c *counter) OnIPSetDelta(string, []string, []string) { c.msgs++ }
func (c *counter) OnIPSetRemoved(string)                   { c.msgs++ }
func (c *counter) OnPolicyUpdate(*Policy)                  { c.msgs++; c.policies++ }
func (c *counter) OnPolicyRemoved(PolicyID)                { c.msgs++ }
func (c *counter) OnProfileUpdate(*Profile)                { c.msgs++ }
func (c *counter) OnProfileRemoved(string)                 { c.msgs++ }
func (c *counter) OnEndpointUpdate(*Endpoint)              { c.msgs++; c.endpoints++ }
func (c *counter) OnEndpointRemoved(EndpointID)            { c.msgs++ }
func (c *counter) OnRouteUpdate(Route)                     { c.msgs++ }
func (c *counter) OnRouteRemoved(netip.Prefix)             { c.msgs++ }
func (c *counter) OnInSync()                               { c.msgs++ }

// peakRSSMB reads the process's peak resident set (VmHWM); resetPeakRSS
// starts a new peak (Linux clear_refs 5).
func peakRSSMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "VmHWM:" {
			kb, _ := strconv.ParseFloat(string(f[1]), 64)
			return kb / 1024
		}
	}
	return 0
}

func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// BenchmarkSnapshot200Local250kTotal10000TagPols mirrors Calico's benchmark
// of that name. Run it with -benchtime=1x. It reports the time of one
// snapshot (s) and its ratio to Calico's 6.65 s (x/ref), the peak RSS of
// the process (inputs included, as in Calico's figure) and its ratio to
// 1.42 GB, and the heap the graph retains afterwards.
func BenchmarkSnapshot200Local250kTotal10000TagPols(b *testing.B) {
	benchSnapshot(b, 250_000, 200, 10_000)
}

func benchSnapshot(b *testing.B, numRemote, numLocal, numPols int) {
	s := makeSnapshot(numRemote, numLocal, numPols)
	var g *Graph
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		g = nil
		runtime.GC()
		resetPeakRSS()
		c := &counter{}
		g = NewGraph("localhost", c)
		b.StartTimer()
		start := time.Now()
		g.OnUpdates(s.policies)
		g.OnUpdates(s.profiles)
		g.OnUpdates(s.remote)
		g.OnUpdates(s.local)
		g.OnInSync()
		g.Flush()
		elapsed := time.Since(start).Seconds()
		b.StopTimer()
		if c.endpoints != numLocal {
			b.Fatalf("%d endpoints sent, want %d", c.endpoints, numLocal)
		}
		peak := peakRSSMB()
		b.ReportMetric(elapsed, "s")
		b.ReportMetric(elapsed/refSeconds, "x/ref")
		b.ReportMetric(peak, "peakRSS-MB")
		b.ReportMetric(peak/refPeakMB, "mem-x/ref")
		b.ReportMetric(float64(c.sets), "IPSets")
		b.ReportMetric(float64(c.policies), "Policies")
		b.ReportMetric(float64(c.msgs), "Msgs")
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b.ReportMetric(float64(m.HeapAlloc)/(1<<20), "HeapAllocMB")
	runtime.KeepAlive(g)
	runtime.KeepAlive(s)
}

// BenchmarkExplain250k10000Pols explains a packet between two local
// endpoints of the snapshot's graph, each selected by ~320 policies (what
// a live node answers, before the dataplane's counters). The reference
// (x/ref) is one Flush of the same graph after one endpoint's labels
// changed: the smallest unit of felix's own work.
func BenchmarkExplain250k10000Pols(b *testing.B) {
	s := makeSnapshot(250_000, 200, 10_000)
	g := NewGraph("localhost", &counter{})
	g.OnUpdates(s.policies)
	g.OnUpdates(s.profiles)
	g.OnUpdates(s.remote)
	g.OnUpdates(s.local)
	g.OnInSync()
	g.Flush()
	from, to := s.local[1].Value.(*v3.WorkloadEndpoint), s.local[0].Value.(*v3.WorkloadEndpoint)
	q := Query{From: End{Namespace: from.Namespace, Name: from.Name}, To: End{Namespace: to.Namespace, Name: to.Name},
		Protocol: 6, SrcPort: 32768, DstPort: 80}
	relabel := *s.remote[7].Value.(*v3.WorkloadEndpoint)
	var explain, ref time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		x, err := g.Explain(q)
		explain += time.Since(start)
		// The snapshot's profiles have no rules: the egress is denied,
		// the ingress allowed by a rule.
		if err != nil || len(x.Sides) != 2 || x.Sides[1].Decider.Rule == nil {
			b.Fatalf("explain: %v %+v", err, x)
		}
		b.StopTimer()
		w := relabel
		w.Labels = map[string]string{markerLabels()[i%31]: "true"}
		start = time.Now()
		g.OnUpdate(Update{Key: datastore.KeyOf(&w), Value: &w})
		g.Flush()
		ref += time.Since(start)
		b.StartTimer()
	}
	b.ReportMetric(explain.Seconds()*1000/float64(b.N), "ms")
	b.ReportMetric(float64(explain)/float64(ref), "x/ref")
}
