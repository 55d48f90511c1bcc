package lab

import (
	"io"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/palisade-net/palisade/libcalico/k8s/kubeapi"
	"github.com/palisade-net/palisade/manifests"
)

// TestClusterDNS: ClusterDNS, which the nodes' kubelets hand to pods, is
// the kube-dns Service's clusterIP in the manifest installDNS applies, and
// lies in the Service range the lab's API server allocates from.
func TestClusterDNS(t *testing.T) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests.CoreDNS), 4096)
	var svc *corev1.Service
	for {
		var m map[string]any
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("manifests/coredns.yaml: %v", err)
		}
		u := unstructured.Unstructured{Object: m}
		if u.GetKind() == "Service" && u.GetName() == "kube-dns" && u.GetNamespace() == "kube-system" {
			svc = &corev1.Service{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, svc); err != nil {
				t.Fatal(err)
			}
		}
	}
	if svc == nil {
		t.Fatal("manifests/coredns.yaml has no Service kube-system/kube-dns")
	}
	if svc.Spec.ClusterIP != ClusterDNS {
		t.Errorf("kube-dns clusterIP %s, ClusterDNS %s", svc.Spec.ClusterIP, ClusterDNS)
	}
	var cidr string
	for _, a := range (kubeapi.APIServer{}).Argv() {
		if v, ok := strings.CutPrefix(a, "--service-cluster-ip-range="); ok {
			cidr = v
		}
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		t.Fatalf("the API server's --service-cluster-ip-range %q: %v", cidr, err)
	}
	if !p.Contains(netip.MustParseAddr(ClusterDNS)) {
		t.Errorf("ClusterDNS %s is outside the Service range %s", ClusterDNS, p)
	}
}
