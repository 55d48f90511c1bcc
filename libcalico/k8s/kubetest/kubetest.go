// Package kubetest starts a real kube-apiserver for a test, on loopback
// against an etcd of the test's own, and stops it when the test ends.
// Nothing acts on the objects unless the test does (no scheduler, no
// kubelet); StartControllerManager adds the controllers that delete
// namespaces and create default service accounts.
package kubetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
	"github.com/palisade-net/palisade/libcalico/k8s/kubeapi"
)

// Cluster is a running API server.
type Cluster struct {
	// Bin is the directory of the Kubernetes binaries.
	Bin   string
	Files kubeapi.Files
	// URL is the API server's address; Kubeconfig a file for it.
	URL, Kubeconfig string
	Config          *rest.Config
	Client          kubernetes.Interface
	// EtcdEndpoints are the API server's own etcd.
	EtcdEndpoints []string
	dir           string
}

// Bin returns the directory of the Kubernetes binaries. When
// PALISADE_KUBE_BIN is set (make test sets it) a missing binary fails the
// test; otherwise the test is skipped unless hack/kube-tools.sh has
// filled its cache.
func Bin(t testing.TB) string {
	t.Helper()
	if d := os.Getenv(kubeapi.BinEnv); d != "" {
		if err := kubeapi.CheckBinDir(d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := kubeapi.DefaultBinDir()
	if err := kubeapi.CheckBinDir(d); err != nil {
		t.Skipf("no Kubernetes binaries (%v)", err)
	}
	return d
}

// Start runs etcd and a kube-apiserver for the test and waits until the
// API server is ready.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin := Bin(t)
	dir := t.TempDir()
	files, err := kubeapi.WriteFiles(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		srv := kubeapi.APIServer{Bin: bin, Files: files, Etcd: etcd, Port: port}
		c := &Cluster{Bin: bin, Files: files, URL: srv.URL(), EtcdEndpoints: etcd, dir: dir,
			Kubeconfig: filepath.Join(dir, "kubeconfig")}
		if err := files.WriteKubeconfig(c.Kubeconfig, c.URL); err != nil {
			t.Fatal(err)
		}
		if lastErr = c.run(t, "kube-apiserver", srv.Argv()); lastErr != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		lastErr = kubeapi.WaitReady(ctx, c.URL, files, nil, nil)
		cancel()
		if lastErr != nil {
			t.Logf("kube-apiserver log:\n%s", tail(filepath.Join(dir, "kube-apiserver.log")))
			continue
		}
		if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
			t.Fatal(err)
		}
		c.Config.QPS, c.Config.Burst = 1000, 2000
		if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Fatalf("starting kube-apiserver: %v", lastErr)
	return nil
}

// StartControllerManager runs kube-controller-manager against the
// cluster: it finalises deleted namespaces and creates each namespace's
// default service account.
func (c *Cluster) StartControllerManager(t testing.TB) {
	t.Helper()
	if err := c.run(t, "kube-controller-manager", kubeapi.ControllerManager(c.Bin, c.Kubeconfig)); err != nil {
		t.Fatal(err)
	}
}

// run starts argv with its output in dir/<name>.log and kills it (and
// waits for it) when the test ends.
func (c *Cluster) run(t testing.TB, name string, argv []string) error {
	logPath := filepath.Join(c.dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, tail(logPath))
		}
	})
	return nil
}

// Log returns the tail of a process's log (kube-apiserver,
// kube-controller-manager).
func (c *Cluster) Log(name string) string { return tail(filepath.Join(c.dir, name+".log")) }

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
