package kubecontrollers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
	"github.com/palisade-net/palisade/libcalico/testsupport/promscrape"
)

func kubeNode(t *testing.T, c *kubetest.Cluster, name string, labels map[string]string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := c.Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// TestNodeController runs the node controller: Kubernetes node labels are
// copied onto the Calico node (labels set only in Calico kept, labels
// removed in Kubernetes removed again); deleting a Kubernetes node
// removes its Calico node with its endpoints, their addresses, its tunnel
// address, its blocks, its BGPPeer and its per-node configuration, while
// a Calico node without a Kubernetes reference is left alone.
func TestNodeController(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	etcd, s := calicoStore(t)
	keep, gone := "nkeep-"+uniq(), "ngone-"+uniq()
	kubeNode(t, c, keep, map[string]string{"zone": "a"})
	kubeNode(t, c, gone, nil)
	f := newFabric(t, s, keep, gone)
	f.calicoNode("outside-"+uniq(), "")
	ns := "n-" + uniq()
	namespace(t, c, ns, nil)
	wep, _ := f.endpoint(gone, ns, "p", "pppppppppppppppp", nil)
	if _, _, err := f.alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "vxlan-tunnel-addr-" + gone, Hostname: gone,
		Attrs: map[string]string{"node": gone, "type": "vxlanTunnelAddress"}, Intent: ipam.IntentTunnel}); err != nil {
		t.Fatal(err)
	}
	peer := &v3.BGPPeer{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPPeer, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: "peer-of-" + gone},
		Spec: v3.BGPPeerSpec{Node: gone, PeerIP: "198.18.0.250", ASNumber: 64512}}
	fc := &v3.FelixConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindFelixConfiguration, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: "node." + gone}}
	for _, r := range []v3.Resource{peer, fc} {
		v3.Default(r)
		if _, err := s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	in := start(t, c.Config, etcd, "kcc-"+uniq(), map[string]string{"ENABLED_CONTROLLERS": "node", "RECONCILER_PERIOD": "1s"})
	in.waitReady(true, 30*time.Second)
	calicoLabels := func(name string) map[string]string {
		r := stored(t, s, datastore.Key{Kind: v3.KindNode, Name: name})
		if r == nil {
			return nil
		}
		return r.GetObjectMeta().Labels
	}
	eventually(t, 2*time.Second, func() error {
		if l := calicoLabels(keep); !maps.Equal(l, map[string]string{"zone": "a", "calico-only": "kept"}) {
			return fmt.Errorf("labels of Calico node %s: %v", keep, l)
		}
		return nil
	})
	kn, _ := c.Client.CoreV1().Nodes().Get(ctx, keep, metav1.GetOptions{})
	kn.Labels = map[string]string{"rack": "r1"}
	if _, err := c.Client.CoreV1().Nodes().Update(ctx, kn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, func() error {
		if l := calicoLabels(keep); !maps.Equal(l, map[string]string{"rack": "r1", "calico-only": "kept"}) {
			return fmt.Errorf("labels of Calico node %s after the change: %v", keep, l)
		}
		return nil
	})

	if err := c.Client.CoreV1().Nodes().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		for _, k := range []datastore.Key{{Kind: v3.KindNode, Name: gone}, datastore.KeyOf(wep), datastore.KeyOf(peer), datastore.KeyOf(fc)} {
			if err := absent(s, k); err != nil {
				return err
			}
		}
		if f.held("pppppppppppppppp") {
			return errors.New("the deleted node's pod address is still allocated")
		}
		if _, err := f.alloc.IPsByHandle(ctx, "vxlan-tunnel-addr-"+gone); !errors.Is(err, datastore.ErrNotFound) {
			return fmt.Errorf("the deleted node's tunnel address: %v", err)
		}
		affs, err := f.alloc.ListAffinities(ctx)
		if err != nil {
			return err
		}
		for _, a := range affs {
			if a.Host == gone {
				return fmt.Errorf("block %s is still affine to %s", a.CIDR, gone)
			}
		}
		return nil
	})
	for _, name := range []string{keep} {
		if stored(t, s, datastore.Key{Kind: v3.KindNode, Name: name}) == nil {
			t.Errorf("Calico node %s was deleted", name)
		}
	}
	nodes, _, _ := s.List(ctx, datastore.ListOptions{Kind: v3.KindNode})
	outside := 0
	for _, r := range nodes {
		if strings.HasPrefix(r.GetObjectMeta().Name, "outside-") {
			outside++
		}
	}
	if outside != 1 {
		t.Errorf("the Calico node without a Kubernetes reference: %d left, want 1", outside)
	}
}

// TestIPAMGarbageCollection checks Calico's leakGracePeriod semantics:
// an address whose pod is gone, or whose pod now has another address, is
// released only after it was seen leaked on two passes at least the
// grace period apart; addresses of live pods, of pods still without an
// address, and of non-pods are never released. calicoctl ipam check
// reports the leak before the release.
func TestIPAMGarbageCollection(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	etcd, s := calicoStore(t)
	node := "gnode-" + uniq()
	kubeNode(t, c, node, nil)
	f := newFabric(t, s, node)
	ns := "g-" + uniq()
	namespace(t, c, ns, nil)
	assign := func(pod, container string) netip.Addr {
		v4, _, err := f.alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "k8s-pod-network." + container, Hostname: node,
			Attrs: map[string]string{"namespace": ns, "pod": pod, "node": node}})
		if err != nil {
			t.Fatal(err)
		}
		return v4.IPs[0].Addr()
	}
	live := assign("live", "live0000")
	runningPod(t, c, ns, "live", node, nil, live)
	assign("starting", "starting")
	runningPod(t, c, ns, "starting", node, nil, netip.Addr{})
	gone := assign("gone", "gone0000")
	assign("moved", "moved000")
	runningPod(t, c, ns, "moved", node, nil, netip.MustParseAddr("10.77.255.1"))
	if _, _, err := f.alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: "vxlan-tunnel-addr-" + node, Hostname: node,
		Attrs: map[string]string{"node": node}, Intent: ipam.IntentTunnel}); err != nil {
		t.Fatal(err)
	}

	// calicoctl ipam check, which knows no pods, reports the addresses
	// no endpoint uses as leaked.
	if bin := os.Getenv("PALISADE_BIN"); bin != "" {
		cmd := exec.Command(filepath.Join(bin, "calicoctl"), "ipam", "check", "--show-problem-ips")
		cmd.Env = append(os.Environ(), "DATASTORE_TYPE=etcdv3", "ETCD_ENDPOINTS="+etcd[0])
		out, err := cmd.CombinedOutput()
		if !strings.Contains(string(out), "leaked") || !strings.Contains(string(out), gone.String()) {
			t.Errorf("calicoctl ipam check does not report %s leaked (%v):\n%s", gone, err, out)
		}
	}

	grace := 2 * time.Second
	began := time.Now()
	in := start(t, c.Config, etcd, "kcc-"+uniq(), map[string]string{"ENABLED_CONTROLLERS": "node", "RECONCILER_PERIOD": "500ms"})
	// Set the grace period through the configuration resource, as a user
	// would: the controllers restart with it.
	setLeakGracePeriod(t, ctx, s, grace)
	eventually(t, 10*time.Second, func() error {
		r, _, err := in.report()
		if err != nil || !r.Ready {
			return fmt.Errorf("not ready: %+v %v", r, err)
		}
		return nil
	})
	held := func(c string) bool { return f.held(c) }
	// Before the grace period has passed since the first sighting,
	// nothing is released.
	time.Sleep(grace / 2)
	for _, cid := range []string{"gone0000", "moved000"} {
		if !held(cid) && time.Since(began) < grace {
			t.Errorf("%s was released before the grace period passed", cid)
		}
	}
	eventually(t, 4*grace, func() error {
		if held("gone0000") || held("moved000") {
			return errors.New("the leaked addresses are still allocated")
		}
		return nil
	})
	if d := time.Since(began); d < grace {
		t.Errorf("released after %s, before the grace period %s", d, grace)
	}
	for _, cid := range []string{"live0000", "starting"} {
		if !held(cid) {
			t.Errorf("the address of pod handle %s was released", cid)
		}
	}
	if _, err := f.alloc.IPsByHandle(ctx, "vxlan-tunnel-addr-"+node); err != nil {
		t.Errorf("the node's tunnel address: %v", err)
	}

	// The IPAM metrics (parsed back with expfmt): what is in use and
	// borrowed per pool and node, the blocks, the pool's size, the two
	// reclaimed addresses, and the node controller's sync lag.
	other := "gother-" + uniq()
	if err := f.alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: live.Next().Next().Next().Next().Next().Next(), HandleID: "borrowed-" + other,
		Hostname: other, Attrs: map[string]string{"node": other}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		fams, err := promscrape.Get(nil, in.health+"/metrics")
		if err != nil {
			return err
		}
		for _, w := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"ipam_allocations_in_use", []string{"ippool", "pool", "node", node}, 3},
			{"ipam_allocations_in_use", []string{"ippool", "pool", "node", other}, 1},
			{"ipam_allocations_borrowed", []string{"ippool", "pool", "node", other}, 1},
			{"ipam_blocks", []string{"ippool", "pool", "node", node}, 1},
			{"ipam_ippool_size", []string{"ippool", "pool"}, 65536},
			{"ipam_allocations_gc_reclamations", []string{"ippool", "pool", "node", node}, 2},
		} {
			if got := promscrape.Find(fams, w.name, w.labels...); got != w.want {
				return fmt.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.want)
			}
		}
		if got := promscrape.Find(fams, "ipam_allocations_borrowed", "ippool", "pool", "node", node); got > 0 {
			return fmt.Errorf("node %s borrows %v addresses from its own block", node, got)
		}
		if got := promscrape.Find(fams, "calico_kube_controllers_sync_lag_seconds", "controller", "node"); got < 1 {
			return fmt.Errorf("calico_kube_controllers_sync_lag_seconds{controller=node} has %v observations", got)
		}
		return nil
	})
}

// setLeakGracePeriod sets the node controller's leakGracePeriod in the
// configuration resource, as a user would: the controllers restart with it.
func setLeakGracePeriod(t *testing.T, ctx context.Context, s datastore.Interface, grace time.Duration) {
	t.Helper()
	k := datastore.Key{Kind: v3.KindKubeControllersConfiguration, Name: "default"}
	eventually(t, 10*time.Second, func() error {
		r, err := s.Get(ctx, k)
		if err != nil {
			return err
		}
		kcc := r.(*v3.KubeControllersConfiguration)
		kcc.Spec.Controllers.Node.LeakGracePeriod = v3.NewDuration(grace)
		_, err = s.Update(ctx, kcc)
		return err
	})
}
