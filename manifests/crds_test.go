package manifests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminNetworkPolicyCRDsMatchModule: network-policy-api-crds.yaml is
// the experimental-channel CRDs of the sigs.k8s.io/network-policy-api
// version go.mod requires (hack/network-policy-api-crds.sh rewrites it),
// so the schema the API server enforces is the one the controller's types
// were generated from.
func TestAdminNetworkPolicyCRDsMatchModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "sigs.k8s.io/network-policy-api").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/network-policy-api: %v", err)
	}
	version, modDir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if modDir == "" {
		t.Fatalf("sigs.k8s.io/network-policy-api %s is not in the module cache: run go mod download", version)
	}
	dir := filepath.Join(modDir, "config", "crd", "experimental")
	if !strings.Contains(AdminNetworkPolicyCRDs, "network-policy-api "+version+" ") {
		t.Errorf("network-policy-api-crds.yaml is not of %s: run hack/network-policy-api-crds.sh", version)
	}
	for _, f := range []string{"policy.networking.k8s.io_adminnetworkpolicies.yaml", "policy.networking.k8s.io_baselineadminnetworkpolicies.yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		body := strings.ReplaceAll(string(b), "---\n", "")
		if !strings.Contains(AdminNetworkPolicyCRDs, body) {
			t.Errorf("network-policy-api-crds.yaml does not hold the module's %s: run hack/network-policy-api-crds.sh", f)
		}
	}
}
