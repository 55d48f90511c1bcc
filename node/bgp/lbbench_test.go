package bgp_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	kubecontrollers "github.com/palisade-net/palisade/kube-controllers"
	"github.com/palisade-net/palisade/kube-controllers/config"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

const lbServices = 1000

// BenchmarkLoadBalancerServices: 1,000 Services of type LoadBalancer
// (each with an EndpointSlice holding a ready endpoint) are created at
// once in a real kube-apiserver, with calico-kube-controllers (the
// loadbalancer controller, in this process) assigning their addresses
// from a LoadBalancer IP pool and calico-node advertising each address as
// a /32 (serviceLoadBalancerAggregation: Disabled) to an external BIRD.
// Measured: from the first create until every Service has its address in
// status.loadBalancer.ingress and BIRD has all 1,000 /32s (s-all-routed),
// and from the moment the last Service and EndpointSlice were created
// (s-routed-after-created, polled every 200 ms): how far Palisade lags
// behind the API server. On this two-core machine the API server alone
// needs 10-12 s for the objects (the reference below), so the issue's
// "all 1,000 in 5 s" can only be read as the second figure here.
//
// The reference, in the same run and against the same API server with
// the same controllers and calico-node watching: the test itself creates
// the same 1,000 Services and EndpointSlices (of another
// loadBalancerClass, so no controller serves them) and writes each
// Service's status, as fast as it can. That is the API work every
// address needs in any implementation (the objects and one status write
// each), on the same loaded machine; the ratio is what IPAM, the
// controller, the service feed and BGP add on top of it.
func BenchmarkLoadBalancerServices(b *testing.B) {
	off := "Disabled"
	f, kc, kubeconfig, tor := serviceBench(b, v3.BGPConfigurationSpec{
		ServiceLoadBalancerIPs:         []v3.ServiceLoadBalancerIPBlock{{CIDR: "198.19.0.0/16"}},
		ServiceLoadBalancerAggregation: &off,
	}, "")
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	pool := &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "lb"}, Spec: v3.IPPoolSpec{CIDR: "198.19.0.0/16",
		AllowedUses: []v3.IPPoolAllowedUse{v3.IPPoolAllowedUseLoadBalancer}}}
	v3.Default(pool)
	f.apply(pool)
	f.node("n1", "198.18.0.1/24", nil)
	f.startEnv("n1", []string{"KUBECONFIG=" + kubeconfig})
	eventually(b, 30*time.Second, "BGP session n1", func() (bool, string) { return tor.established("n1"), tor.show("show", "protocols") })

	st, err := config.FromEnv(func(k string) string {
		return map[string]string{"DATASTORE_TYPE": "etcdv3", "ETCD_ENDPOINTS": "http://" + f.etcd, "ENABLED_CONTROLLERS": "loadbalancer",
			"LEASE_NAME": "lbbench", "POD_NAME": "lbbench"}[k]
	})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- kubecontrollers.Run(ctx, kubecontrollers.Options{Static: st, RESTConfig: kc.Config}) }()
	b.Cleanup(func() { cancel(); <-done })

	var ours, addressed, ref, lag []time.Duration
	for i := 0; b.Loop(); i++ {
		refNS, ns := fmt.Sprintf("lbref-%d", i), fmt.Sprintf("lb-%d", i)
		for _, n := range []string{refNS, ns} {
			if _, err := kc.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		createLBServices(b, kc, refNS, "example.com/other", true)
		ref = append(ref, time.Since(start))

		base := torRoutes(b, tor)
		start = time.Now()
		createLBServices(b, kc, ns, "", false)
		created := time.Now()
		eventually(b, 60*time.Second, "every Service has its address", func() (bool, string) {
			n := lbReady(b, kc.Client, ns)
			return n == lbServices, fmt.Sprintf("%d of %d Services have an address", n, lbServices)
		})
		addressed = append(addressed, time.Since(start))
		eventually(b, 60*time.Second, "BIRD has every LoadBalancer /32", func() (bool, string) {
			n := torRoutes(b, tor) - base
			return n >= lbServices, fmt.Sprintf("BIRD has %d new routes of %d", n, lbServices)
		})
		ours = append(ours, time.Since(start))
		lag = append(lag, time.Since(created))
	}
	mean := func(ds []time.Duration) float64 {
		var s time.Duration
		for _, d := range ds {
			s += d
		}
		return s.Seconds() / float64(len(ds))
	}
	b.ReportMetric(mean(ours), "s-all-routed")
	b.ReportMetric(mean(addressed), "s-all-addressed")
	b.ReportMetric(mean(lag), "s-routed-after-created")
	b.ReportMetric(mean(ref), "s-ref-api-only")
	b.ReportMetric(mean(ours)/mean(ref), "x/ref")
}

// serviceBench is what the service benchmarks share: a fabric with a
// real kube-apiserver, the BGPConfiguration spec, and an external BIRD
// "tor" (AS 65001, 198.18.0.250) peering with node n1 (198.18.0.1, not
// started), extra appended to its configuration. It returns the fabric,
// the API server, the nodes' kubeconfig and the BIRD.
func serviceBench(b *testing.B, spec v3.BGPConfigurationSpec, extra string) (*fabric, *kubetest.Cluster, string, *birdPeer) {
	f := newFabric(b)
	kc, kubeconfig := f.kube()
	f.apply(&v3.BGPConfiguration{ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: spec})
	f.apply(&v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: "tor"}, Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.250", ASNumber: 65001}})
	tor := f.startBird("tor", "198.18.0.250/24", bird2Bin, bird2Ctl, `router id 198.18.0.250;
protocol device { }
protocol direct { ipv4; interface "eth0"; }
protocol bgp n1 { local 198.18.0.250 as 65001; neighbor 198.18.0.1 as 64512; ipv4 { import all; export none; }; }
`+extra)
	return f, kc, kubeconfig, tor
}

// createLBServices creates lbServices LoadBalancer Services in ns, each
// with an EndpointSlice holding one ready endpoint on n1. With
// writeStatus the test writes each Service's status itself (addresses
// 10.200.0.0/22, outside every advertised range).
func createLBServices(b *testing.B, kc *kubetest.Cluster, ns, class string, writeStatus bool) {
	createServices(b, kc.Client, ns, lbServices, func(i int, svc *corev1.Service) []discoveryv1.Endpoint {
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		if class != "" {
			svc.Spec.LoadBalancerClass = &class
		}
		return []discoveryv1.Endpoint{readyEP("n1", fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), true)}
	}, func(i int, out *corev1.Service) error {
		if !writeStatus {
			return nil
		}
		a := netip.AddrFrom4([4]byte{10, 200, byte(i / 250), byte(i%250 + 1)})
		out.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: a.String()}}
		_, err := kc.Client.CoreV1().Services(ns).UpdateStatus(context.Background(), out, metav1.UpdateOptions{})
		return err
	})
}

// createServices creates n Services svc-<i> in ns (port 80, shaped by
// mk, which returns the endpoints of its EndpointSlice), then runs after
// on each created Service, from 32 goroutines.
func createServices(b *testing.B, c kubernetes.Interface, ns string, n int, mk func(int, *corev1.Service) []discoveryv1.Endpoint, after func(int, *corev1.Service) error) {
	ctx := context.Background()
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := "svc-" + strconv.Itoa(i)
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
					Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
				eps := mk(i, svc)
				out, err := createRetrying(ctx, func() (*corev1.Service, error) {
					return c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
				}, func() (*corev1.Service, error) {
					return c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
				})
				if err != nil {
					errs <- fmt.Errorf("creating %s/%s: %w", ns, name, err)
					continue
				}
				slice := &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
					AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
				}
				if _, err := createRetrying(ctx, func() (*discoveryv1.EndpointSlice, error) {
					return c.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
				}, func() (*discoveryv1.EndpointSlice, error) {
					return c.DiscoveryV1().EndpointSlices(ns).Get(ctx, slice.Name, metav1.GetOptions{})
				}); err != nil {
					errs <- fmt.Errorf("creating the EndpointSlice of %s/%s: %w", ns, name, err)
					continue
				}
				if err := after(i, out); err != nil {
					errs <- fmt.Errorf("service %s/%s: %w", ns, name, err)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// createRetrying creates an object, trying again when the API server
// timed out (on a busy machine it does, with 10,000 objects coming in):
// a create that timed out may still have been stored, so on a retry an
// "already exists" is the object, read back with get.
func createRetrying[T any](ctx context.Context, create, get func() (T, error)) (T, error) {
	var out T
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		out, err = create()
		switch {
		case err == nil:
			return out, nil
		case attempt > 0 && apierrors.IsAlreadyExists(err):
			return get()
		case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err):
			select {
			case <-ctx.Done():
				return out, err
			case <-time.After(time.Duration(attempt+1) * time.Second):
			}
		default:
			return out, err
		}
	}
	return out, err
}

// lbReady counts the Services in ns with an address in status.
func lbReady(b *testing.B, c kubernetes.Interface, ns string) int {
	// From the watch cache: polling must not load the API server much.
	list, err := c.CoreV1().Services(ns).List(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, s := range list.Items {
		if len(s.Status.LoadBalancer.Ingress) > 0 {
			n++
		}
	}
	return n
}

// torRoutes is how many routes BIRD has learned from n1.
func torRoutes(b *testing.B, tor *birdPeer) int {
	out := tor.show("show", "route", "protocol", "n1", "count")
	for _, line := range strings.Split(out, "\n") {
		fs := strings.Fields(line)
		if len(fs) > 1 && fs[1] == "of" {
			if n, err := strconv.Atoi(fs[0]); err == nil {
				return n
			}
		}
	}
	b.Fatalf("birdc show route count: %q", out)
	return 0
}
