package bgp_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

const (
	heldServices  = 10000
	heldEndpoints = 5 // per Service: 50,000 in all
)

// BenchmarkServiceFeedFootprint: calico-node's resident memory and CPU
// while its service feed holds 10,000 Services with 50,000 endpoints
// (one EndpointSlice of five endpoints each, one of them ready on this
// node; every Service has internalTrafficPolicy Local, so each cluster
// IP is advertised as a /32 and BIRD's route count says the feed holds
// them all). The reference is the same calico-node process, same
// configuration and BGP session, measured before the Services exist.
// CPU is sampled over 5 s of holding (no changes): what the feed costs
// at rest. Goal: RSS ≤ 150 MB.
func BenchmarkServiceFeedFootprint(b *testing.B) {
	f, kc, kubeconfig, tor := serviceBench(b, v3.BGPConfigurationSpec{
		ServiceClusterIPs: []v3.ServiceClusterIPBlock{{CIDR: "10.96.0.0/16"}},
	}, "")
	ctx := context.Background()
	f.node("n1", "198.18.0.1/24", nil)
	f.startEnv("n1", []string{"KUBECONFIG=" + kubeconfig})
	pid := f.procs["n1"].Process.Pid
	eventually(b, 30*time.Second, "BGP session n1", func() (bool, string) { return tor.established("n1"), tor.show("show", "protocols") })
	// The service CIDR is advertised once the (empty) feed has synced.
	eventually(b, 30*time.Second, "the service CIDR at BIRD", func() (bool, string) { return torRoutes(b, tor) >= 1, tor.show("show", "route") })

	var rss, refRSS, cpu, refCPU float64
	for i := 0; b.Loop(); i++ {
		if i > 0 {
			continue // one fill is the measurement; more would only add Services
		}
		refRSS, refCPU = footprint(b, pid, 5*time.Second)
		ns := "held"
		if _, err := kc.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		local := corev1.ServiceInternalTrafficPolicyLocal
		createServices(b, kc.Client, ns, heldServices, func(i int, svc *corev1.Service) []discoveryv1.Endpoint {
			svc.Spec.InternalTrafficPolicy = &local
			eps := []discoveryv1.Endpoint{readyEP("n1", fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), true)}
			for k := 1; k < heldEndpoints; k++ {
				eps = append(eps, readyEP("n"+strconv.Itoa(k+1), fmt.Sprintf("10.%d.%d.%d", 244+k, i/250, i%250+1), true))
			}
			return eps
		}, func(int, *corev1.Service) error { return nil })
		eventually(b, 10*time.Minute, "BIRD has a /32 for every Service", func() (bool, string) {
			n := torRoutes(b, tor) - 1
			return n >= heldServices, fmt.Sprintf("BIRD has %d of %d service routes", n, heldServices)
		})
		rss, cpu = footprint(b, pid, 5*time.Second)
	}
	b.ReportMetric(rss, "MB-rss")
	b.ReportMetric(refRSS, "MB-rss-no-services")
	b.ReportMetric(cpu, "cpu-ms/s")
	b.ReportMetric(refCPU, "cpu-ms/s-no-services")
	b.ReportMetric(rss/refRSS, "x/ref")
	if rss > 150 {
		b.Logf("RSS %.0f MB is over the 150 MB goal", rss)
	}
}

// footprint samples process pid over d: its resident memory at the end
// (MB) and the CPU it used (ms per second).
func footprint(b *testing.B, pid int, d time.Duration) (rssMB, cpuMsPerSec float64) {
	b.Helper()
	c0 := cpuTicks(b, pid)
	t0 := time.Now()
	time.Sleep(d) // a sampling window, not a wait for a condition
	c1 := cpuTicks(b, pid)
	el := time.Since(t0).Seconds()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if fs := strings.Fields(line); len(fs) >= 2 && fs[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(fs[1], 64)
			rssMB = kb / 1024
		}
	}
	// Clock ticks are 1/100 s on Linux (USER_HZ).
	return rssMB, float64(c1-c0) * 10 / el
}

// cpuTicks is the user+system CPU time of pid, in clock ticks.
func cpuTicks(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	fs := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	u, _ := strconv.ParseInt(fs[11], 10, 64)
	s, _ := strconv.ParseInt(fs[12], 10, 64)
	return u + s
}
