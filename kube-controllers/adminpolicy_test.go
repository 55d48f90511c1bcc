package kubecontrollers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
	anpclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/palisade-net/palisade/kube-controllers/controllers"
	"github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/k8s/kubeapi"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
	"github.com/palisade-net/palisade/manifests"
)

// refused are the catalogue entries the CRDs' schema refuses; the API
// server takes anp-bad-ports (a backwards range, an ICMP port), which the
// controller must then enforce failing closed.
var refused = map[string]bool{"anp-bad-action": true, "anp-bad-subject": true, "banp-bad-pass": true}

// catalogue is libcalico/k8s's conversion catalogue, whose ANP and BANP
// entries this test sends through a real API server.
const catalogue = "../libcalico/k8s/testdata/catalogue"

// adminClient installs the network-policy-api CRDs shipped in manifests/
// in the API server and returns a client of them.
func adminClient(t *testing.T, c *kubetest.Cluster) anpclient.Interface {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kubeapi.InstallCRDs(ctx, c.Config, manifests.AdminNetworkPolicyCRDs); err != nil {
		t.Fatal(err)
	}
	rc := rest.CopyConfig(c.Config)
	ac, err := anpclient.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// The API server starts serving a new CRD shortly after Established.
	eventually(t, 10*time.Second, func() error {
		_, err := ac.PolicyV1alpha1().AdminNetworkPolicies().List(ctx, metav1.ListOptions{})
		return err
	})
	return ac
}

// catalogueNode creates a node with labels and InternalIP addresses (the
// nodes libcalico/k8s's catalogue converts against).
func catalogueNode(t *testing.T, c *kubetest.Cluster, name string, labels map[string]string, addrs ...string) {
	t.Helper()
	ctx := context.Background()
	n, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	if _, err := c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// goldenSpec reads the GlobalNetworkPolicy of a catalogue golden file,
// defaulted as the datastore stores it.
func goldenSpec(t *testing.T, path string) *v3.GlobalNetworkPolicy {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g v3.GlobalNetworkPolicy
	if err := yaml.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	v3.Default(&g)
	return &g
}

// wantGNP waits until the GlobalNetworkPolicy name in etcd has want's
// spec (nil: until it is gone).
func wantGNP(t *testing.T, s *etcdv3.Store, name string, want *v3.GlobalNetworkPolicy) {
	t.Helper()
	k := datastore.Key{Kind: v3.KindGlobalNetworkPolicy, Name: name}
	eventually(t, 15*time.Second, func() error {
		r := stored(t, s, k)
		if want == nil {
			if r != nil {
				return fmt.Errorf("%s still stored", name)
			}
			return nil
		}
		if r == nil {
			return fmt.Errorf("%s not stored", name)
		}
		got := r.(*v3.GlobalNetworkPolicy)
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			g, _ := json.Marshal(got.Spec)
			w, _ := json.Marshal(want.Spec)
			return fmt.Errorf("%s:\n got %s\nwant %s", name, g, w)
		}
		return nil
	})
}

// readyCondition waits until get returns conditions whose Ready one has
// status and reason, and returns its message.
func readyCondition(t *testing.T, get func() ([]metav1.Condition, int64, error), status metav1.ConditionStatus, reason string) string {
	t.Helper()
	var msg string
	eventually(t, 15*time.Second, func() error {
		conds, gen, err := get()
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(conds, controllers.AdminConditionType)
		if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != gen {
			return fmt.Errorf("condition %+v, want %s %s at generation %d", c, status, reason, gen)
		}
		msg = c.Message
		return nil
	})
	return msg
}

// TestAdminNetworkPolicy sends every ANP and BANP of the conversion
// catalogue through a real kube-apiserver with the CRDs manifests/ ships:
// the API server must refuse the ones its schema forbids (refused, whose
// fail-closed conversion the pure catalogue test covers)
// and the controller must write every other one into etcd exactly as its
// golden file says, set its Ready condition (False, FailedClosed, where
// part of it cannot be expressed), follow node changes for nodes peers,
// and remove the policy with its object. The tiers are Calico's.
func TestAdminNetworkPolicy(t *testing.T) {
	c := cluster(t)
	ac := adminClient(t, c)
	ctx := context.Background()
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 0 {
		t.Fatalf("the catalogue's nodes peers need the API server to hold no other node: %v %d", err, len(nodes.Items))
	}
	catalogueNode(t, c, "anp-node1", map[string]string{"kubernetes.io/os": "linux", "zone": "a"}, "198.18.0.1")
	catalogueNode(t, c, "anp-node2", map[string]string{"kubernetes.io/os": "linux", "zone": "b"}, "198.18.0.2", "fd00::2")
	etcd, s := calicoStore(t)
	in := start(t, c.Config, etcd, "kcc-"+uniq(), map[string]string{"ENABLED_CONTROLLERS": "adminnetworkpolicy", "RECONCILER_PERIOD": "2s"})
	in.waitReady(true, 30*time.Second)

	for _, tier := range k8s.AdminTiers() {
		eventually(t, 10*time.Second, func() error {
			r := stored(t, s, datastore.Key{Kind: v3.KindTier, Name: tier.Name})
			if r == nil {
				return fmt.Errorf("tier %s not stored", tier.Name)
			}
			got := r.(*v3.Tier).Spec
			if *got.Order != *tier.Spec.Order || *got.DefaultAction != v3.Pass {
				return fmt.Errorf("tier %s: order %v default %v", tier.Name, *got.Order, *got.DefaultAction)
			}
			return nil
		})
	}

	inputs, _ := filepath.Glob(catalogue + "/*anp-*.yaml")
	if len(inputs) < 10 {
		t.Fatalf("catalogue has %d ANP/BANP entries", len(inputs))
	}
	accepted := 0
	for _, path := range inputs {
		base := strings.TrimSuffix(filepath.Base(path), ".yaml")
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		golden := goldenSpec(t, strings.TrimSuffix(path, ".yaml")+".golden")
		failsClosed := strings.HasPrefix(string(mustRead(t, strings.TrimSuffix(path, ".yaml")+".golden")), "# error:")
		bad := refused[base]
		t.Run(base, func(t *testing.T) {
			var get func() ([]metav1.Condition, int64, error)
			var del func() error
			if strings.HasPrefix(base, "banp-") {
				var b anpv1.BaselineAdminNetworkPolicy
				if err := yaml.UnmarshalStrict(src, &b); err != nil {
					t.Fatal(err)
				}
				_, err = ac.PolicyV1alpha1().BaselineAdminNetworkPolicies().Create(ctx, &b, metav1.CreateOptions{})
				get = func() ([]metav1.Condition, int64, error) {
					got, err := ac.PolicyV1alpha1().BaselineAdminNetworkPolicies().Get(ctx, b.Name, metav1.GetOptions{})
					if err != nil {
						return nil, 0, err
					}
					return got.Status.Conditions, got.Generation, nil
				}
				del = func() error {
					return ac.PolicyV1alpha1().BaselineAdminNetworkPolicies().Delete(ctx, b.Name, metav1.DeleteOptions{})
				}
			} else {
				var a anpv1.AdminNetworkPolicy
				if err := yaml.UnmarshalStrict(src, &a); err != nil {
					t.Fatal(err)
				}
				_, err = ac.PolicyV1alpha1().AdminNetworkPolicies().Create(ctx, &a, metav1.CreateOptions{})
				get = func() ([]metav1.Condition, int64, error) {
					got, err := ac.PolicyV1alpha1().AdminNetworkPolicies().Get(ctx, a.Name, metav1.GetOptions{})
					if err != nil {
						return nil, 0, err
					}
					return got.Status.Conditions, got.Generation, nil
				}
				del = func() error {
					return ac.PolicyV1alpha1().AdminNetworkPolicies().Delete(ctx, a.Name, metav1.DeleteOptions{})
				}
			}
			if bad {
				if !apierrors.IsInvalid(err) {
					t.Fatalf("the API server accepted %s (err %v); its schema should refuse it", base, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("creating %s: %v", base, err)
			}
			accepted++
			wantGNP(t, s, golden.Name, golden)
			if failsClosed {
				msg := readyCondition(t, get, metav1.ConditionFalse, controllers.AdminReasonFailedClosed)
				if !strings.Contains(msg, golden.Name) || !strings.Contains(msg, "failing closed") {
					t.Errorf("condition message %q", msg)
				}
			} else {
				readyCondition(t, get, metav1.ConditionTrue, controllers.AdminReasonConverted)
			}
			if base == "anp-egress-nodes" {
				// node2 moves to zone c: the deny-zone-c rule now matches it.
				n, err := c.Client.CoreV1().Nodes().Get(ctx, "anp-node2", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				n.Labels["zone"] = "c"
				if _, err := c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				eventually(t, 15*time.Second, func() error {
					r := stored(t, s, datastore.Key{Kind: v3.KindGlobalNetworkPolicy, Name: golden.Name})
					for _, rule := range r.(*v3.GlobalNetworkPolicy).Spec.Egress {
						if rule.Metadata != nil && rule.Metadata.Annotations[k8s.AdminRuleNameAnnotation] == "deny-zone-c" &&
							strings.Join(rule.Destination.Nets, ",") == "198.18.0.2/32" {
							return nil
						}
					}
					return fmt.Errorf("no deny-zone-c rule for node2's address")
				})
				n, _ = c.Client.CoreV1().Nodes().Get(ctx, "anp-node2", metav1.GetOptions{})
				n.Labels["zone"] = "b"
				if _, err := c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				wantGNP(t, s, golden.Name, golden)
			}
			if err := del(); err != nil {
				t.Fatal(err)
			}
			wantGNP(t, s, golden.Name, nil)
		})
	}
	if accepted < 8 {
		t.Errorf("only %d catalogue entries were accepted by the API server", accepted)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
