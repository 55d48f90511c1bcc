package manifests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

const dnsManifest = "coredns.yaml"

// corednsBinary is hack/coredns.sh's coredns; the test fails without it
// (make test builds it).
func corednsBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../hack/coredns.sh", "--print-dir").Output()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "coredns")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v (run hack/coredns.sh)", err)
	}
	return p
}

// TestCoreDNS applies coredns.yaml to a real kube-apiserver that
// authorizes by RBAC, checks what the coredns ServiceAccount is granted,
// then runs the image's coredns with the manifest's Corefile and that
// account's token, and resolves Services through it over UDP and TCP:
// a ClusterIP Service created after CoreDNS started, a headless one by its
// EndpointSlice, the kube-dns Service itself, a reverse lookup and a pod
// name. A name outside the cluster's zones is refused.
func TestCoreDNS(t *testing.T) {
	c := kubetest.StartRBAC(t)
	objs := load(t, dnsManifest)
	var applied string
	if !t.Run("apply", func(t *testing.T) { applied = apply(t, c, objs) }) {
		t.FailNow()
	}
	t.Run("golden", func(t *testing.T) { checkApplied(t, applied, len(objs), "testdata/coredns.applied.yaml") })
	t.Run("rbac", func(t *testing.T) { corednsRBAC(t, c) })
	t.Run("resolve", func(t *testing.T) { corednsResolves(t, c, objs) })
}

// corednsRBAC: RBAC grants the coredns ServiceAccount list and watch of
// what the kubernetes plugin watches, and nothing beyond what every
// ServiceAccount has.
func corednsRBAC(t *testing.T, c *kubetest.Cluster) {
	var want []string
	for _, v := range []string{"list", "watch"} {
		for _, r := range []string{"/namespaces", "/pods", "/services", "discovery.k8s.io/endpointslices"} {
			want = append(want, v+" "+r)
		}
	}
	sort.Strings(want)
	for _, ns := range []string{"kube-system", "default"} {
		baseline := rules(t, c, sa("palisade-nobody"), ns)
		var got []string
		for _, r := range rules(t, c, sa("coredns"), ns) {
			if !slices.Contains(baseline, r) {
				got = append(got, r)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("coredns in %s: RBAC grants\n  %s\nwant\n  %s", ns, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

// replaceOnce replaces old, which must occur exactly once, in s.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("the Corefile has %q %d times, want once:\n%s", old, n, s)
	}
	return strings.Replace(s, old, new, 1)
}

func corednsResolves(t *testing.T, c *kubetest.Cluster, objs []*unstructured.Unstructured) {
	ctx := context.Background()
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", "coredns", &cm)
	var svc corev1.Service
	find(t, objs, "Service", "kube-dns", &svc)
	// The manifest's Corefile, on free ports of this machine, and reaching
	// the API server with the ServiceAccount's token through a kubeconfig
	// instead of the pod's mounted one.
	dnsPort, healthPort, readyPort, metricsPort := freePort(t), freePort(t), freePort(t), freePort(t)
	corefile := cm.Data["Corefile"]
	for _, zone := range []string{"cluster.local", "in-addr.arpa", "ip6.arpa"} {
		corefile = replaceOnce(t, corefile, zone+":53", zone+":"+strconv.Itoa(dnsPort))
	}
	corefile = replaceOnce(t, corefile, "health :8080", fmt.Sprintf("health 127.0.0.1:%d", healthPort))
	corefile = replaceOnce(t, corefile, "ready :8181", fmt.Sprintf("ready 127.0.0.1:%d", readyPort))
	corefile = replaceOnce(t, corefile, "prometheus :9153", fmt.Sprintf("prometheus 127.0.0.1:%d", metricsPort))
	kubeconfig := kubeconfigFor(t, c, token(t, c, "coredns", nil))
	corefile = replaceOnce(t, corefile, "pods insecure\n", "pods insecure\n        kubeconfig "+kubeconfig+" x\n")
	conf := filepath.Join(t.TempDir(), "Corefile")
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	out := start(t, corednsBinary(t), []string{"-conf", conf}, nil)
	// Ready once the kubernetes plugin has listed everything it watches,
	// which the ServiceAccount's RBAC must allow.
	eventually(t, 20*time.Second, func() error {
		r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort))
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			return fmt.Errorf("/ready: %s\n%s", r.Status, out.String())
		}
		return nil
	})
	t.Logf("coredns ready in %s", time.Since(began).Round(time.Millisecond))

	web, err := c.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := true
	if _, err := c.Client.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "db-1", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("pg"), Port: new(int32(5432)), Protocol: new(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(dnsPort))
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}}
			host := func(name string) []string {
				t.Helper()
				var got []string
				// The Services created above reach CoreDNS through its watch.
				eventually(t, 5*time.Second, func() error {
					var err error
					got, err = r.LookupHost(ctx, name)
					return err
				})
				return got
			}
			for name, want := range map[string][]string{
				"web.default.svc.cluster.local.":          {web.Spec.ClusterIP},
				"db.default.svc.cluster.local.":           {"10.244.1.5"},
				"kube-dns.kube-system.svc.cluster.local.": {svc.Spec.ClusterIP},
				"10-244-1-5.default.pod.cluster.local.":   {"10.244.1.5"},
			} {
				if got := host(name); !slices.Equal(got, want) {
					t.Errorf("%s: %v, want %v", name, got, want)
				}
			}
			_, srvs, err := r.LookupSRV(ctx, "http", "tcp", "web.default.svc.cluster.local.")
			if err != nil || len(srvs) != 1 || srvs[0].Port != 80 || srvs[0].Target != "web.default.svc.cluster.local." {
				t.Errorf("SRV _http._tcp.web: %v %+v", err, srvs)
			}
			if names, err := r.LookupAddr(ctx, web.Spec.ClusterIP); err != nil || !slices.Equal(names, []string{"web.default.svc.cluster.local."}) {
				t.Errorf("PTR %s: %v %v", web.Spec.ClusterIP, names, err)
			}
			if _, err := r.LookupHost(ctx, "nothere.default.svc.cluster.local."); !isNotFound(err) {
				t.Errorf("nothere.default.svc.cluster.local.: %v, want NXDOMAIN", err)
			}
			// Outside the cluster's zones: refused, never forwarded.
			if got, err := r.LookupHost(ctx, "example.com."); err == nil || isNotFound(err) {
				t.Errorf("example.com.: %v %v, want the server to refuse", got, err)
			}
		})
	}
	if !strings.Contains(out.String(), `"A IN web.default.svc.cluster.local. udp`) {
		t.Errorf("the log plugin did not log the queries:\n%s", out.String())
	}
}

func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}
