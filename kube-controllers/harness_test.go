package kubecontrollers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/palisade-net/palisade/kube-controllers/config"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// shared is the API server (with etcd and kube-controller-manager) the
// package's tests share; each test has its own Calico etcd, and its own
// namespaces, nodes and lease.
var (
	shared    *kubetest.Cluster
	sharedErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plkcc-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, sharedErr = kubetest.Shared(dir)
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// cluster is the shared API server; without Kubernetes binaries (and
// PALISADE_KUBE_BIN unset) the test is skipped, otherwise a failure to
// start it fails the test.
func cluster(t testing.TB) *kubetest.Cluster {
	t.Helper()
	if errors.Is(sharedErr, kubetest.ErrNoBinaries) {
		t.Skip(sharedErr)
	}
	if sharedErr != nil {
		t.Fatalf("the shared kube-apiserver: %v", sharedErr)
	}
	return shared
}

// uniq is a short random suffix for names a test owns.
func uniq() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// instance is one calico-kube-controllers run in the test process.
type instance struct {
	t      *testing.T
	health string
	cancel context.CancelFunc
	done   chan error
}

// start runs the controllers against the API server at rc and the etcd
// at etcd, with env on top of the test defaults (a lease of its own,
// short election timings, a free health port).
func start(t *testing.T, rc *rest.Config, etcd []string, lease string, env map[string]string) *instance {
	t.Helper()
	port := freePort(t)
	vars := map[string]string{"DATASTORE_TYPE": "etcdv3", "ETCD_ENDPOINTS": etcd[0], "LEASE_NAME": lease,
		"LEASE_DURATION": "3s", "LEASE_RENEW_DEADLINE": "2s", "LEASE_RETRY_PERIOD": "250ms",
		"HEALTH_PORT": strconv.Itoa(port), "POD_NAME": "kcc-" + uniq()}
	for k, v := range env {
		vars[k] = v
	}
	st, err := config.FromEnv(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{t: t, health: fmt.Sprintf("http://127.0.0.1:%d", port), cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- Run(ctx, Options{Static: st, RESTConfig: rc}) }()
	t.Cleanup(in.stop)
	return in
}

// stop ends the run and waits for it.
func (in *instance) stop() {
	in.cancel()
	select {
	case err := <-in.done:
		if err != nil {
			in.t.Errorf("Run: %v", err)
		}
		in.done <- nil
	case <-time.After(20 * time.Second):
		in.t.Error("Run did not return 20s after its context ended")
	}
}

// report reads /readiness.
func (in *instance) report() (healthReport, int, error) {
	resp, err := http.Get(in.health + "/readiness")
	if err != nil {
		return healthReport{}, 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r healthReport
	if err := json.Unmarshal(b, &r); err != nil {
		return r, resp.StatusCode, fmt.Errorf("/readiness: %q: %w", b, err)
	}
	return r, resp.StatusCode, nil
}

// waitReady waits until /readiness answers 200 (as the leader, when
// leader is set).
func (in *instance) waitReady(leader bool, timeout time.Duration) healthReport {
	in.t.Helper()
	var last healthReport
	eventually(in.t, timeout, func() error {
		r, code, err := in.report()
		last = r
		if err != nil {
			return err
		}
		if code != http.StatusOK || (leader && !r.Leader) {
			return fmt.Errorf("readiness %d: %+v", code, r)
		}
		return nil
	})
	return last
}

// eventually retries fn every 20 ms until it succeeds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// calicoStore is a fresh Calico etcd for the test and a client of it.
func calicoStore(t testing.TB) ([]string, *etcdv3.Store) {
	t.Helper()
	eps := etcdtest.Start(t)
	s, err := etcdv3.New(context.Background(), etcdv3.Config{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return eps, s
}

// namespace creates a namespace with labels and deletes it when the test
// ends.
func namespace(t *testing.T, c *kubetest.Cluster, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}
