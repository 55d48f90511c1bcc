package kubecontrollers

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// binary is the calico-kube-controllers binary: $PALISADE_BIN's, or one
// built for the test.
func binary(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("PALISADE_BIN"); d != "" {
		return filepath.Join(d, "calico-kube-controllers")
	}
	out := filepath.Join(t.TempDir(), "calico-kube-controllers")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/calico-kube-controllers")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building calico-kube-controllers: %v\n%s", err, b)
	}
	return out
}

// TestBinary runs the calico-kube-controllers binary as a Deployment
// would (environment only): it becomes ready and converts a policy, stops
// cleanly on SIGTERM, and refuses a bad configuration with a clear error.
func TestBinary(t *testing.T) {
	c := cluster(t)
	bin := binary(t)
	etcd, s := calicoStore(t)
	ns := "b-" + uniq()
	namespace(t, c, ns, nil)
	port := freePort(t)
	env := append(os.Environ(), "DATASTORE_TYPE=etcdv3", "ETCD_ENDPOINTS="+etcd[0], "KUBECONFIG="+c.Kubeconfig,
		"HEALTH_PORT="+strconv.Itoa(port), "LEASE_NAME=kcc-"+uniq(), "ENABLED_CONTROLLERS=policy,namespace,serviceaccount,workloadendpoint,node")
	var out bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("calico-kube-controllers output:\n%s", out.String())
		}
	})
	eventually(t, 30*time.Second, func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readiness", port))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readiness %s", resp.Status)
		}
		return nil
	})
	if _, err := c.Client.NetworkingV1().NetworkPolicies(ns).Create(context.Background(), netpol(ns, "p", 80, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, func() error { return wantPolicy(c, s, ns, "p") })
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	_, _ = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(metrics.String(), "calico_kube_controllers_is_leader 1") {
		t.Errorf("/metrics:\n%s", metrics.String())
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15s after SIGTERM")
	}

	for _, tc := range []struct{ env, want string }{
		{"DATASTORE_TYPE=kubernetes", `DATASTORE_TYPE "kubernetes" is not supported`},
		{"ENABLED_CONTROLLERS=policy,bogus", `unknown controller "bogus"`},
		{"AUTO_HOST_ENDPOINTS=enabled", "automatic host endpoints are not implemented"},
	} {
		cmd := exec.Command(bin)
		cmd.Env = append(append([]string{}, env...), tc.env, "LEASE_NAME=kcc-"+uniq(), "HEALTH_PORT=0")
		b, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: exit %v, output does not say %q:\n%s", tc.env, err, tc.want, b)
		}
	}
}
