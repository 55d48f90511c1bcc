package k8s

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	anpv1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
	"sigs.k8s.io/yaml"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

var update = flag.Bool("update", false, "rewrite the golden files under libcalico/k8s/testdata/catalogue")

// TestCatalogue converts every Kubernetes object of the catalogue
// (testdata/catalogue/*.yaml: NetworkPolicies, Namespaces,
// ServiceAccounts, Pods) and compares the Calico resources with the
// .golden file beside it; every resource produced must also pass Calico's
// validation, so no conversion writes what the datastore would refuse.
func TestCatalogue(t *testing.T) {
	inputs, err := filepath.Glob("testdata/catalogue/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no catalogue: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := convertDocument(src)
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(in, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./libcalico/k8s -update)", err)
			}
			if got != string(want) {
				t.Errorf("conversion of %s differs from %s:\n--- got\n%s\n--- want\n%s", in, golden, got, want)
			}
		})
	}
}

// convertDocument converts one catalogue object and renders the result:
// a conversion error as a leading "# error:" line, then the resources.
func convertDocument(src []byte) (string, error) {
	var tm struct{ Kind string }
	if err := yaml.Unmarshal(src, &tm); err != nil {
		return "", err
	}
	var out strings.Builder
	var res any
	switch tm.Kind {
	case "NetworkPolicy":
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict(src, &np); err != nil {
			return "", err
		}
		pol, cerr := NetworkPolicy(&np)
		if cerr != nil {
			fmt.Fprintf(&out, "# error: %v\n", cerr)
		}
		if err := valid(pol); err != nil {
			return "", err
		}
		res = pol
	case "AdminNetworkPolicy":
		var anp anpv1.AdminNetworkPolicy
		if err := yaml.UnmarshalStrict(src, &anp); err != nil {
			return "", err
		}
		pol, cerr := AdminNetworkPolicy(&anp, catalogueNodes)
		if cerr != nil {
			fmt.Fprintf(&out, "# error: %v\n", cerr)
		}
		if err := valid(pol); err != nil {
			return "", err
		}
		res = pol
	case "BaselineAdminNetworkPolicy":
		var banp anpv1.BaselineAdminNetworkPolicy
		if err := yaml.UnmarshalStrict(src, &banp); err != nil {
			return "", err
		}
		pol, cerr := BaselineAdminNetworkPolicy(&banp, catalogueNodes)
		if cerr != nil {
			fmt.Fprintf(&out, "# error: %v\n", cerr)
		}
		if err := valid(pol); err != nil {
			return "", err
		}
		res = pol
	case "Namespace":
		var ns corev1.Namespace
		if err := yaml.UnmarshalStrict(src, &ns); err != nil {
			return "", err
		}
		p := NamespaceProfile(&ns)
		if err := valid(p); err != nil {
			return "", err
		}
		res = p
	case "ServiceAccount":
		var sa corev1.ServiceAccount
		if err := yaml.UnmarshalStrict(src, &sa); err != nil {
			return "", err
		}
		p := ServiceAccountProfile(&sa)
		if err := valid(p); err != nil {
			return "", err
		}
		res = p
	case "Pod":
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(src, &pod); err != nil {
			return "", err
		}
		wep := &v3.WorkloadEndpoint{
			TypeMeta:   v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: "node1-k8s-" + pod.Name + "-eth0", Namespace: pod.Namespace, Labels: PodLabels(&pod)},
			Spec: v3.WorkloadEndpointSpec{Orchestrator: OrchestratorKubernetes, Node: "node1", Pod: pod.Name, Endpoint: "eth0",
				ServiceAccountName: pod.Spec.ServiceAccountName, Profiles: PodProfiles(&pod), Ports: PodPorts(&pod),
				InterfaceName: "cali0123456789a", IPNetworks: []string{"10.244.0.1/32"}},
		}
		if err := valid(wep); err != nil {
			return "", err
		}
		res = wep
	default:
		return "", fmt.Errorf("kind %q is not in the catalogue's kinds", tm.Kind)
	}
	b, err := yaml.Marshal(res)
	if err != nil {
		return "", err
	}
	out.Write(b)
	return out.String(), nil
}

// catalogueNodes are the nodes the catalogue's egress nodes peers
// select from: node1 (linux, zone a), node2 (linux, zone b, dual stack).
func catalogueNodes(sel labels.Selector) []string {
	nodes := []struct {
		labels labels.Set
		addrs  []string
	}{
		{labels.Set{"kubernetes.io/os": "linux", "zone": "a"}, []string{"198.18.0.1/32"}},
		{labels.Set{"kubernetes.io/os": "linux", "zone": "b"}, []string{"198.18.0.2/32", "fd00::2/128"}},
	}
	var out []string
	for _, n := range nodes {
		if sel.Matches(n.labels) {
			out = append(out, n.addrs...)
		}
	}
	return out
}

func valid(r v3.Resource) error {
	v3.Default(r)
	if err := v3.Validate(r); err != nil {
		return fmt.Errorf("the conversion is not a valid Calico resource: %w", err)
	}
	return nil
}
