package cniplugin

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinariesStayLean guards the start-up time of the plugins, which
// kubelet execs for every pod: neither binary may link gRPC, protobuf,
// etcd's Go client, zap or anything else a long-running process needs.
func TestBinariesStayLean(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not on PATH: %v", err)
	}
	forbidden := []string{
		"google.golang.org/grpc", "google.golang.org/protobuf", "go.etcd.io/", "go.uber.org/zap",
		"golang.org/x/net/trace", "html/template", "github.com/osrg/gobgp",
	}
	for _, pkg := range []string{"./cmd/calico", "./cmd/calico-ipam"} {
		out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s links %s (nothing under %s may be imported by a CNI binary)", pkg, dep, f)
				}
			}
		}
	}
}
