package kubecontrollers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/palisade-net/palisade/kube-controllers/config"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

func netpol(ns, name string, port int32, from map[string]string) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	p := intstr.FromInt32(port)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "a"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: from}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}},
			}},
		},
	}
}

// stored returns the Calico resource at k, nil when absent.
func stored(t *testing.T, s *etcdv3.Store, k datastore.Key) v3.Resource {
	t.Helper()
	r, err := s.Get(context.Background(), k)
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// wantPolicy checks that the knp.default policy of np in etcd is np's
// conversion (as the API server stored np, defaults included).
func wantPolicy(c *kubetest.Cluster, s *etcdv3.Store, ns, name string) error {
	ctx := context.Background()
	np, err := c.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	want, err := k8s.NetworkPolicy(np)
	if err != nil {
		return err
	}
	v3.Default(want)
	r, err := s.Get(ctx, datastore.Key{Kind: v3.KindNetworkPolicy, Namespace: ns, Name: k8s.PolicyName(name)})
	if err != nil {
		return err
	}
	got := r.(*v3.NetworkPolicy)
	gb, _ := json.Marshal(got.Spec)
	wb, _ := json.Marshal(want.Spec)
	if string(gb) != string(wb) || !maps.Equal(got.Labels, want.Labels) {
		return fmt.Errorf("%s/%s: stored\n%s\nwant\n%s", ns, k8s.PolicyName(name), gb, wb)
	}
	return nil
}

func absent(s *etcdv3.Store, k datastore.Key) error {
	_, err := s.Get(context.Background(), k)
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%s still exists", k)
}

// TestPolicyNamespaceServiceAccount runs the policy, namespace and
// serviceaccount controllers against a real API server: on start they
// make etcd match the API exactly (stale resources left from an outage
// deleted or corrected, missing ones created, resources they do not own
// untouched), they follow changes within a second, they reconcile what
// changed while they were stopped when they start again, and a full
// resync repairs etcd edited behind their back.
func TestPolicyNamespaceServiceAccount(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	etcd, s := calicoStore(t)
	x, y := "x-"+uniq(), "y-"+uniq()
	namespace(t, c, x, map[string]string{"ns": "x", "team": "blue"})
	namespace(t, c, y, map[string]string{"ns": "y"})
	nps := c.Client.NetworkingV1().NetworkPolicies(x)
	for _, np := range []*networkingv1.NetworkPolicy{netpol(x, "allow-b", 80, map[string]string{"pod": "b"}), netpol(x, "changed", 81, map[string]string{"pod": "c"})} {
		if _, err := nps.Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: x, Labels: map[string]string{"role": "api"}}}
	if _, err := c.Client.CoreV1().ServiceAccounts(x).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What an earlier run left behind: a policy whose NetworkPolicy was
	// deleted while the controllers were down, a policy whose spec is out
	// of date, profiles of a namespace and a service account that are
	// gone, and a user's own policy, which is not the controllers' to touch.
	order := 5.0
	stale := []v3.Resource{
		&v3.NetworkPolicy{TypeMeta: v3.TypeMeta{Kind: v3.KindNetworkPolicy, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: k8s.PolicyName("deleted-while-down"), Namespace: x},
			Spec:       v3.NetworkPolicySpec{Selector: "all()", Ingress: []v3.Rule{{Action: v3.Allow}}}},
		&v3.NetworkPolicy{TypeMeta: v3.TypeMeta{Kind: v3.KindNetworkPolicy, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: k8s.PolicyName("changed"), Namespace: x},
			Spec:       v3.NetworkPolicySpec{Selector: "all()", Ingress: []v3.Rule{{Action: v3.Allow}}}},
		&v3.NetworkPolicy{TypeMeta: v3.TypeMeta{Kind: v3.KindNetworkPolicy, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: "users-own", Namespace: x},
			Spec:       v3.NetworkPolicySpec{Order: &order, Selector: "all()", Ingress: []v3.Rule{{Action: v3.Deny}}}},
		&v3.Profile{TypeMeta: v3.TypeMeta{Kind: v3.KindProfile, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: "kns.gone-" + x}},
		&v3.Profile{TypeMeta: v3.TypeMeta{Kind: v3.KindProfile, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: "ksa." + x + ".gone"}},
		&v3.Profile{TypeMeta: v3.TypeMeta{Kind: v3.KindProfile, APIVersion: v3.APIVersion}, ObjectMeta: v3.ObjectMeta{Name: "users-profile"}},
	}
	for _, r := range stale {
		v3.Default(r)
		if _, err := s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	lease := "kcc-" + uniq()
	env := map[string]string{"ENABLED_CONTROLLERS": "policy,namespace,serviceaccount", "RECONCILER_PERIOD": "2s"}
	in := start(t, c.Config, etcd, lease, env)
	began := time.Now()
	in.waitReady(true, 30*time.Second)
	t.Logf("ready after %s", time.Since(began).Round(time.Millisecond))

	// The start made etcd match.
	for _, name := range []string{"allow-b", "changed"} {
		if err := wantPolicy(c, s, x, name); err != nil {
			t.Error(err)
		}
	}
	for _, k := range []datastore.Key{
		{Kind: v3.KindNetworkPolicy, Namespace: x, Name: k8s.PolicyName("deleted-while-down")},
		{Kind: v3.KindProfile, Name: "kns.gone-" + x}, {Kind: v3.KindProfile, Name: "ksa." + x + ".gone"},
	} {
		if err := absent(s, k); err != nil {
			t.Error(err)
		}
	}
	for _, k := range []datastore.Key{{Kind: v3.KindNetworkPolicy, Namespace: x, Name: "users-own"}, {Kind: v3.KindProfile, Name: "users-profile"}} {
		if stored(t, s, k) == nil {
			t.Errorf("%s was deleted: it is not the controllers'", k)
		}
	}
	prof := stored(t, s, datastore.Key{Kind: v3.KindProfile, Name: "kns." + x}).(*v3.Profile)
	wantLabels := map[string]string{"pcns.ns": "x", "pcns.team": "blue", "pcns.kubernetes.io/metadata.name": x, "pcns.projectcalico.org/name": x}
	if !maps.Equal(prof.Spec.LabelsToApply, wantLabels) || len(prof.Spec.Ingress) != 1 || len(prof.Spec.Egress) != 1 {
		t.Errorf("kns.%s: %+v, want labelsToApply %v and allow-all rules", x, prof.Spec, wantLabels)
	}
	ksa := stored(t, s, datastore.Key{Kind: v3.KindProfile, Name: "ksa." + x + ".api"})
	if ksa == nil || !maps.Equal(ksa.(*v3.Profile).Spec.LabelsToApply, map[string]string{"pcsa.role": "api", "pcsa.projectcalico.org/name": "api"}) {
		t.Errorf("ksa.%s.api: %+v", x, ksa)
	}
	eventually(t, 10*time.Second, func() error {
		// kube-controller-manager creates each namespace's default account.
		if stored(t, s, datastore.Key{Kind: v3.KindProfile, Name: "ksa." + y + ".default"}) == nil {
			return fmt.Errorf("no ksa.%s.default", y)
		}
		return nil
	})

	// The configuration resource was created and its status written.
	kcc := stored(t, s, datastore.Key{Kind: v3.KindKubeControllersConfiguration, Name: "default"}).(*v3.KubeControllersConfiguration)
	if kcc.Spec.Controllers.Node == nil || kcc.Spec.Controllers.Node.LeakGracePeriod == nil || kcc.Spec.Controllers.Node.LeakGracePeriod.Duration != 15*time.Minute {
		t.Errorf("default configuration spec: %+v", kcc.Spec)
	}
	eventually(t, 5*time.Second, func() error {
		kcc = stored(t, s, datastore.Key{Kind: v3.KindKubeControllersConfiguration, Name: "default"}).(*v3.KubeControllersConfiguration)
		st := kcc.Status
		if st.RunningConfig == nil || st.RunningConfig.Controllers.Policy == nil || st.RunningConfig.Controllers.Node != nil ||
			st.EnvironmentVars["ENABLED_CONTROLLERS"] != env["ENABLED_CONTROLLERS"] {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})

	// Live changes are followed within a second.
	within := func(what string, fn func() error) {
		t.Helper()
		began := time.Now()
		eventually(t, time.Second, fn)
		t.Logf("%s: %s", what, time.Since(began).Round(time.Millisecond))
	}
	if _, err := nps.Create(ctx, netpol(x, "new", 8080, map[string]string{"pod": "z"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	within("NetworkPolicy created", func() error { return wantPolicy(c, s, x, "new") })
	np, _ := nps.Get(ctx, "new", metav1.GetOptions{})
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	if _, err := nps.Update(ctx, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	within("NetworkPolicy updated", func() error { return wantPolicy(c, s, x, "new") })
	if err := nps.Delete(ctx, "new", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	within("NetworkPolicy deleted", func() error {
		return absent(s, datastore.Key{Kind: v3.KindNetworkPolicy, Namespace: x, Name: k8s.PolicyName("new")})
	})
	nsObj, _ := c.Client.CoreV1().Namespaces().Get(ctx, y, metav1.GetOptions{})
	nsObj.Labels["ns"] = "y2"
	if _, err := c.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	within("namespace label changed", func() error {
		p := stored(t, s, datastore.Key{Kind: v3.KindProfile, Name: "kns." + y})
		if p == nil || p.(*v3.Profile).Spec.LabelsToApply["pcns.ns"] != "y2" {
			return fmt.Errorf("kns.%s: %+v", y, p)
		}
		return nil
	})
	saObj, _ := c.Client.CoreV1().ServiceAccounts(x).Get(ctx, "api", metav1.GetOptions{})
	saObj.Labels = map[string]string{"role": "web"}
	if _, err := c.Client.CoreV1().ServiceAccounts(x).Update(ctx, saObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	within("service account label changed", func() error {
		p := stored(t, s, datastore.Key{Kind: v3.KindProfile, Name: "ksa." + x + ".api"})
		if p == nil || p.(*v3.Profile).Spec.LabelsToApply["pcsa.role"] != "web" {
			return fmt.Errorf("ksa.%s.api: %+v", x, p)
		}
		return nil
	})

	// etcd edited behind the controllers' back is repaired by the resync.
	k := datastore.Key{Kind: v3.KindNetworkPolicy, Namespace: x, Name: k8s.PolicyName("allow-b")}
	if _, err := s.Delete(ctx, k, ""); err != nil {
		t.Fatal(err)
	}
	pk := datastore.Key{Kind: v3.KindProfile, Name: "kns." + x}
	tampered := stored(t, s, pk).(*v3.Profile)
	tampered.Spec.LabelsToApply["pcns.ns"] = "forged"
	if _, err := s.Update(ctx, tampered); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error { return wantPolicy(c, s, x, "allow-b") })
	eventually(t, 5*time.Second, func() error {
		if l := stored(t, s, pk).(*v3.Profile).Spec.LabelsToApply["pcns.ns"]; l != "x" {
			return fmt.Errorf("kns.%s pcns.ns is %q", x, l)
		}
		return nil
	})

	// Stopped, the world moves on; started again, it catches up.
	in.stop()
	if err := nps.Delete(ctx, "allow-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	np, _ = nps.Get(ctx, "changed", metav1.GetOptions{})
	np.Spec.Ingress[0].Ports = nil
	if _, err := nps.Update(ctx, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nps.Create(ctx, netpol(x, "created-while-down", 9090, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().ServiceAccounts(x).Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	in = start(t, c.Config, etcd, lease, env)
	in.waitReady(true, 30*time.Second)
	for _, name := range []string{"changed", "created-while-down"} {
		if err := wantPolicy(c, s, x, name); err != nil {
			t.Error(err)
		}
	}
	for _, k := range []datastore.Key{{Kind: v3.KindNetworkPolicy, Namespace: x, Name: k8s.PolicyName("allow-b")}, {Kind: v3.KindProfile, Name: "ksa." + x + ".api"}} {
		if err := absent(s, k); err != nil {
			t.Errorf("after the restart: %v", err)
		}
	}

	// Exactly the converted policies of x remain, and the user's own.
	items, _, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindNetworkPolicy, Namespace: x})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range items {
		names = append(names, r.GetObjectMeta().Name)
	}
	slices.Sort(names)
	if want := []string{k8s.PolicyName("changed"), k8s.PolicyName("created-while-down"), "users-own"}; !slices.Equal(names, want) {
		t.Errorf("policies in %s: %v, want %v", x, names, want)
	}
	_ = config.ConfigName
}

func keyOfPolicy(ns, name string) datastore.Key {
	return datastore.Key{Kind: v3.KindNetworkPolicy, Namespace: ns, Name: k8s.PolicyName(name)}
}
