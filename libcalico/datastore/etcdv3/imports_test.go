package etcdv3_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientStaysLean guards the layering the CNI binaries rely on: the
// datastore interface imports no etcd package, the shared rules and the
// lean client import neither etcd's Go packages nor gRPC or protobuf, and
// the gRPC backend never pulls in the etcd server.
func TestClientStaysLean(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not on PATH: %v", err)
	}
	const mod = "github.com/palisade-net/palisade/libcalico/datastore"
	cases := []struct {
		pkg       string
		forbidden string
	}{
		{mod, "go.etcd.io/"},
		{mod + "/etcdv3", "go.etcd.io/etcd/server/"},
		{mod + "/etcdcore", "go.etcd.io/"},
		{mod + "/etcdcore", "google.golang.org/"},
		{mod + "/etcdhttp", "go.etcd.io/"},
		{mod + "/etcdhttp", "google.golang.org/"},
	}
	for _, tc := range cases {
		out, err := exec.Command(goBin, "list", "-deps", tc.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, tc.forbidden) {
				t.Errorf("%s depends on %s (nothing under %s may be imported)", tc.pkg, dep, tc.forbidden)
			}
		}
	}
}
