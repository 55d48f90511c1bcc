package kubecontrollers

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/palisade-net/palisade/kube-controllers/controllers"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
	"github.com/palisade-net/palisade/libcalico/testsupport/promscrape"
)

// lbPool writes an IP pool with the LoadBalancer use.
func lbPool(t testing.TB, s *etcdv3.Store, name, cidr string, blockSize int, manual bool) {
	t.Helper()
	p := &v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: name},
		Spec: v3.IPPoolSpec{CIDR: cidr, BlockSize: blockSize, AllowedUses: []v3.IPPoolAllowedUse{v3.IPPoolAllowedUseLoadBalancer}}}
	if manual {
		m := v3.AssignmentManual
		p.Spec.AssignmentMode = &m
	}
	v3.Default(p)
	if _, err := s.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// lbService creates a Service of type typ with annotations and, when
// class is set, a loadBalancerClass.
func lbService(t testing.TB, c *kubetest.Cluster, ns, name string, typ corev1.ServiceType, ann map[string]string, class string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec: corev1.ServiceSpec{Type: typ, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080), Protocol: corev1.ProtocolTCP}}}}
	if class != "" {
		svc.Spec.LoadBalancerClass = &class
	}
	out, err := c.Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service %s/%s: %v", ns, name, err)
	}
	return out
}

// ingressOf is a Service's status.loadBalancer.ingress addresses.
func ingressOf(t testing.TB, c *kubetest.Cluster, ns, name string) ([]string, error) {
	svc, err := c.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out, nil
}

// waitIngress waits until the Service's ingress satisfies ok.
func waitIngress(t *testing.T, c *kubetest.Cluster, ns, name string, timeout time.Duration, ok func([]string) error) []string {
	t.Helper()
	var got []string
	eventually(t, timeout, func() (err error) {
		if got, err = ingressOf(t, c, ns, name); err != nil {
			return err
		}
		if err := ok(got); err != nil {
			return fmt.Errorf("service %s/%s ingress %v: %w", ns, name, got, err)
		}
		return nil
	})
	return got
}

func oneIn(cidr string) func([]string) error {
	p := netip.MustParsePrefix(cidr)
	return func(ips []string) error {
		if len(ips) != 1 {
			return errors.New("want one address")
		}
		if a, err := netip.ParseAddr(ips[0]); err != nil || !p.Contains(a) {
			return fmt.Errorf("want an address in %s", p)
		}
		return nil
	}
}

// lbAllocations counts the LoadBalancer addresses in IPAM, by Service.
func lbAllocations(t testing.TB, s *etcdv3.Store) map[string][]string {
	t.Helper()
	blocks, err := ipam.New(s, s.KV()).ListBlocks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, b := range blocks {
		for _, al := range b.Allocations {
			if al.Attrs["type"] == "LoadBalancer" {
				k := al.Attrs["namespace"] + "/" + al.Attrs["service"]
				out[k] = append(out[k], al.IP.String())
			}
		}
	}
	return out
}

// TestLoadBalancerIPAM runs the loadbalancer controller against the
// real API server: addresses from LoadBalancer pools only, the
// annotations, classes, exhaustion with an Event, release on deletion
// and on a type change, and a restart that keeps every address where it
// is and releases what was deleted meanwhile.
func TestLoadBalancerIPAM(t *testing.T) {
	c := cluster(t)
	eps, s := calicoStore(t)
	ns := "lb-" + uniq()
	namespace(t, c, ns, nil)
	ctx := context.Background()
	newFabric(t, s) // a workload pool, 10.77.0.0/16, that must never serve a Service
	lbPool(t, s, "lb-auto", "203.0.113.0/30", 30, false)
	lbPool(t, s, "lb-manual", "203.0.113.64/30", 30, true)
	lbPool(t, s, "lb-v6", "fd00:203::/126", 126, true)
	lease := "kcc-" + uniq()
	env := map[string]string{"ENABLED_CONTROLLERS": "loadbalancer"}
	in := start(t, c.Config, eps, lease, env)
	in.waitReady(true, 30*time.Second)

	lbService(t, c, ns, "auto", corev1.ServiceTypeLoadBalancer, nil, "")
	lbService(t, c, ns, "fixed", corev1.ServiceTypeLoadBalancer, map[string]string{controllers.AnnotationLoadBalancerIPs: `["203.0.113.3","fd00:203::2"]`}, "")
	lbService(t, c, ns, "pooled", corev1.ServiceTypeLoadBalancer, map[string]string{controllers.AnnotationIPv4Pools: `["lb-manual"]`}, "")
	lbService(t, c, ns, "calico-class", corev1.ServiceTypeLoadBalancer, nil, controllers.LoadBalancerClass)
	lbService(t, c, ns, "other-class", corev1.ServiceTypeLoadBalancer, nil, "example.com/other")
	lbService(t, c, ns, "cluster", corev1.ServiceTypeClusterIP, nil, "")
	lbService(t, c, ns, "bad", corev1.ServiceTypeLoadBalancer, map[string]string{controllers.AnnotationLoadBalancerIPs: `["203.0.113.1","203.0.113.2"]`}, "")

	auto := waitIngress(t, c, ns, "auto", 20*time.Second, oneIn("203.0.113.0/30"))
	waitIngress(t, c, ns, "fixed", 20*time.Second, func(ips []string) error {
		if !slices.Equal(ips, []string{"203.0.113.3", "fd00:203::2"}) {
			return errors.New("want 203.0.113.3 and fd00:203::2")
		}
		return nil
	})
	waitIngress(t, c, ns, "pooled", 20*time.Second, oneIn("203.0.113.64/30"))
	waitIngress(t, c, ns, "calico-class", 20*time.Second, oneIn("203.0.113.0/30"))
	waitEvent(t, c, ns, "bad", controllers.ReasonInvalidRequest, "at most one IPv4")

	// The pool 203.0.113.0/30 holds auto, fixed and calico-class: one
	// address is left; the next two Services find it full.
	lbService(t, c, ns, "last", corev1.ServiceTypeLoadBalancer, nil, "")
	waitIngress(t, c, ns, "last", 20*time.Second, oneIn("203.0.113.0/30"))
	lbService(t, c, ns, "starved", corev1.ServiceTypeLoadBalancer, nil, "")
	waitEvent(t, c, ns, "starved", controllers.ReasonAllocationFailed, "no free address in the LoadBalancer IP pools")
	for _, name := range []string{"other-class", "cluster", "starved", "bad"} {
		if ips, err := ingressOf(t, c, ns, name); err != nil || len(ips) != 0 {
			t.Errorf("service %s: ingress %v (%v); want none", name, ips, err)
		}
	}
	fams, err := promscrape.Get(nil, in.health+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v := promscrape.Find(fams, "ipam_loadbalancer_allocations"); v != 6 {
		t.Errorf("ipam_loadbalancer_allocations %v; want 6", v)
	}

	// Deleting auto frees its address, which starved then gets.
	if err := c.Client.CoreV1().Services(ns).Delete(ctx, "auto", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitIngress(t, c, ns, "starved", 30*time.Second, func(ips []string) error {
		if !slices.Equal(ips, auto) {
			return fmt.Errorf("want auto's freed %v", auto)
		}
		return nil
	})

	// A Service that stops being a LoadBalancer gives its address back.
	patchType(t, c, ns, "last", corev1.ServiceTypeClusterIP)
	eventually(t, 20*time.Second, func() error {
		if got := lbAllocations(t, s)[ns+"/last"]; len(got) != 0 {
			return fmt.Errorf("last still holds %v", got)
		}
		return nil
	})

	// A restart: nothing is reassigned, and what was deleted while no
	// controller ran is released.
	before := map[string][]string{}
	for _, name := range []string{"fixed", "pooled", "calico-class", "starved"} {
		before[name], _ = ingressOf(t, c, ns, name)
	}
	in.stop()
	if err := c.Client.CoreV1().Services(ns).Delete(ctx, "pooled", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	in = start(t, c.Config, eps, lease, env)
	in.waitReady(true, 30*time.Second)
	eventually(t, 20*time.Second, func() error {
		got := lbAllocations(t, s)
		if len(got[ns+"/pooled"]) != 0 {
			return fmt.Errorf("the deleted pooled still holds %v", got[ns+"/pooled"])
		}
		n := 0
		for k, ips := range got {
			n += len(ips)
			if name := strings.TrimPrefix(k, ns+"/"); !slices.Equal(ips, before[name]) {
				return fmt.Errorf("%s holds %v in IPAM; its status had %v", k, ips, before[name])
			}
		}
		if n != 4 {
			return fmt.Errorf("%d LoadBalancer addresses in IPAM, want 4 (fixed 2, calico-class, starved): %v", n, got)
		}
		return nil
	})
	for name, want := range before {
		if name == "pooled" {
			continue
		}
		if got, _ := ingressOf(t, c, ns, name); !slices.Equal(got, want) {
			t.Errorf("after the restart %s has %v; before %v", name, got, want)
		}
	}
}

func patchType(t testing.TB, c *kubetest.Cluster, ns, name string, typ corev1.ServiceType) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		svc, err := c.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Spec.Type = typ
		svc.Spec.Ports[0].NodePort = 0
		svc.Spec.ExternalTrafficPolicy = ""
		svc.Spec.AllocateLoadBalancerNodePorts = nil
		_, err = c.Client.CoreV1().Services(ns).Update(context.Background(), svc, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || attempt > 5 {
			t.Fatalf("changing %s/%s to %s: %v", ns, name, typ, err)
		}
	}
}

// waitEvent waits for a Warning Event on the Service with reason and a
// message containing text.
func waitEvent(t *testing.T, c *kubetest.Cluster, ns, name, reason, text string) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		evs, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == name && e.InvolvedObject.Kind == "Service" {
				if e.Reason == reason && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, text) {
					return nil
				}
				seen = append(seen, e.Reason+": "+e.Message)
			}
		}
		return fmt.Errorf("no %s event naming %q on service %s; saw %q", reason, text, name, seen)
	})
}

// TestLoadBalancerIPAMGarbageCollection: with the node controller's IPAM
// garbage collection running beside the loadbalancer controller (grace
// period 1 s), a Service's LoadBalancer address stays in IPAM and in the
// Service's status through many collection passes, while a leaked pod
// address beside it is collected. A LoadBalancer address whose Service
// does not exist (left by an instance that died before releasing it) is
// released on the controller's periodic resync, without a restart.
func TestLoadBalancerIPAMGarbageCollection(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	etcd, s := calicoStore(t)
	node := "lbgc-" + uniq()
	kubeNode(t, c, node, nil)
	f := newFabric(t, s, node)
	ns := "lbgc-" + uniq()
	namespace(t, c, ns, nil)
	lbPool(t, s, "lb-gc", "203.0.113.16/29", 29, false)
	if _, _, err := f.alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "k8s-pod-network.leak0000", Hostname: node,
		Attrs: map[string]string{"namespace": ns, "pod": "gone", "node": node}}); err != nil {
		t.Fatal(err)
	}
	grace := time.Second
	in := start(t, c.Config, etcd, "kcc-"+uniq(), map[string]string{"ENABLED_CONTROLLERS": "node,loadbalancer", "RECONCILER_PERIOD": "300ms"})
	setLeakGracePeriod(t, ctx, s, grace)
	in.waitReady(true, 30*time.Second)

	web := lbService(t, c, ns, "web", corev1.ServiceTypeLoadBalancer, nil, "")
	ingress := waitIngress(t, c, ns, "web", 20*time.Second, oneIn("203.0.113.16/29"))
	handle := ipam.LoadBalancerHandle(ns, "web", string(web.UID))
	// The orphan: a Service's address in IPAM, the Service gone before
	// this controller ever saw it.
	orphan := netip.MustParseAddr("203.0.113.22")
	if err := f.alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: orphan, Hostname: ipam.LoadBalancerHost, Intent: ipam.IntentLoadBalancer,
		HandleID: ipam.LoadBalancerHandle(ns, "crashed", "uid-of-a-deleted-service"),
		Attrs:    map[string]string{ipam.AttrService: "crashed", ipam.AttrNamespace: ns, ipam.AttrType: ipam.AttrTypeLoadBalancer}}); err != nil {
		t.Fatal(err)
	}
	webHeld := func() error {
		ips, err := f.alloc.IPsByHandle(ctx, handle)
		if err != nil || len(ips) != 1 || ips[0].String() != ingress[0] {
			return fmt.Errorf("web's handle holds %v (%v); want its address %s", ips, err, ingress[0])
		}
		if got, err := ingressOf(t, c, ns, "web"); err != nil || !slices.Equal(got, ingress) {
			return fmt.Errorf("web's status has %v (%v); want %v", got, err, ingress)
		}
		return nil
	}
	// The garbage collection runs: the leaked pod address goes.
	eventually(t, 10*grace+10*time.Second, func() error {
		if f.held("leak0000") {
			return errors.New("the leaked pod address is still allocated")
		}
		return nil
	})
	// The orphan goes on a resync.
	eventually(t, 20*time.Second, func() error {
		if _, err := f.alloc.GetAssignmentAttributes(ctx, orphan); !errors.Is(err, ipam.ErrNotAssigned) {
			return fmt.Errorf("the address %s of a Service that does not exist is still allocated (%v)", orphan, err)
		}
		return nil
	})
	// Through several more grace periods of collection, web keeps its
	// address.
	for deadline := time.Now().Add(4 * grace); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := webHeld(); err != nil {
			t.Fatal(err)
		}
	}
	if r, _, err := in.report(); err != nil || !r.Ready {
		t.Errorf("controllers not ready at the end: %+v %v", r, err)
	}
}
