package bgp_test

import (
	"context"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

const svcChanges = 200

// BenchmarkServiceEndpointChange: an endpoint of a Service with
// externalTrafficPolicy Local flips between ready and not ready 200 times
// in a real kube-apiserver; each time, how long until the external BIRD
// has (or has lost) the LoadBalancer /32 from the node. The reference is
// the same change made in BIRD itself: a BIRD node beside ours enables or
// disables a static /32 (birdc), seen by the same external BIRD. Reported:
// p50 and p99 of both, and the ratio of the p99s.
func BenchmarkServiceEndpointChange(b *testing.B) {
	f, kc, kubeconfig, tor := serviceBench(b, v3.BGPConfigurationSpec{
		ServiceLoadBalancerIPs: []v3.ServiceLoadBalancerIPBlock{{CIDR: "198.19.201.0/24"}},
	}, "protocol bgp ref { local 198.18.0.250 as 65001; neighbor 198.18.0.3 as 64513; ipv4 { import all; export none; }; }\n")
	ctx := context.Background()
	ref := f.startBird("ref", "198.18.0.3/24", bird2Bin, bird2Ctl, `router id 198.18.0.3;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
protocol static svc { ipv4; route 198.19.202.10/32 blackhole; }
protocol bgp tor { local 198.18.0.3 as 64513; neighbor 198.18.0.250 as 65001; ipv4 { import none; export where source = RTS_STATIC; }; }
`)
	svc, err := kc.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.19.201.10"}}
	if _, err = kc.Client.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	slices := kc.Client.DiscoveryV1().EndpointSlices("default")
	es, err := slices.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{readyEP("n1", "10.244.0.5", false)},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	f.node("n1", "198.18.0.1/24", nil)
	f.startEnv("n1", []string{"KUBECONFIG=" + kubeconfig})
	lbRange := netip.MustParsePrefix("198.19.201.0/24")
	ours := netip.MustParsePrefix("198.19.201.10/32")
	theirs := netip.MustParsePrefix("198.19.202.10/32")
	tor.waitHas(lbRange, true)
	tor.waitHas(theirs, true)

	// until waits for BIRD to have (or lack) pfx and says when.
	until := func(pfx netip.Prefix, want bool) time.Time {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			out := tor.show("show", "route", "for", pfx.String())
			if strings.Contains(out, pfx.String()+" ") == want {
				return time.Now()
			}
			time.Sleep(2 * time.Millisecond)
		}
		b.Fatalf("BIRD: %s present=%v not reached:\n%s", pfx, want, tor.show("show", "route"))
		return time.Time{}
	}
	var oursLat, refLat []time.Duration
	for b.Loop() {
		for i := 0; i < svcChanges; i++ {
			ready := i%2 == 0
			es.Endpoints = []discoveryv1.Endpoint{readyEP("n1", "10.244.0.5", ready)}
			start := time.Now()
			if es, err = slices.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
			oursLat = append(oursLat, until(ours, ready).Sub(start))

			verb := "disable"
			if ready {
				// theirs is up from the start: go down first, then up.
				verb = "enable"
			}
			if i == 0 {
				if out, err := exec.Command(ref.ctl, "-s", ref.sock, "disable", "svc").CombinedOutput(); err != nil {
					b.Fatalf("birdc: %v\n%s", err, out)
				}
				until(theirs, false)
			}
			start = time.Now()
			if out, err := exec.Command(ref.ctl, "-s", ref.sock, verb, "svc").CombinedOutput(); err != nil {
				b.Fatalf("birdc %s: %v\n%s", verb, err, out)
			}
			refLat = append(refLat, until(theirs, ready).Sub(start))
		}
	}
	p := func(ds []time.Duration, q float64) float64 {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(p(oursLat, 0.5), "ms-p50")
	b.ReportMetric(p(oursLat, 0.99), "ms-p99")
	b.ReportMetric(p(refLat, 0.5), "ms-p50-bird")
	b.ReportMetric(p(refLat, 0.99), "ms-p99-bird")
	b.ReportMetric(p(oursLat, 0.99)/p(refLat, 0.99), "x/ref")
}
