// Package kubetest starts a real kube-apiserver for a test, on loopback
// against an etcd of the test's own, and stops it when the test ends.
// Nothing acts on the objects unless the test does (no scheduler, no
// kubelet); StartControllerManager adds the controllers that delete
// namespaces and create default service accounts.
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/palisade-net/palisade/libcalico/datastore/embedded"
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
	mu            sync.Mutex
	procs         []func()
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
// API server is ready; both stop when the test ends.
func Start(t testing.TB) *Cluster { t.Helper(); return start(t, "") }

// StartRBAC is Start with RBAC authorization: the admin token is in
// system:masters, everyone else gets what RBAC objects grant.
func StartRBAC(t testing.TB) *Cluster { t.Helper(); return start(t, "RBAC") }

func start(t testing.TB, authz string) *Cluster {
	t.Helper()
	bin := Bin(t)
	etcd := etcdtest.Start(t)
	c, err := launch(t.TempDir(), bin, etcd, authz)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-apiserver log (tail):\n%s", c.Log("kube-apiserver"))
		}
		c.Stop()
	})
	return c
}

// Launch runs a kube-apiserver storing into etcd, with its files in dir,
// and waits until it is ready; Stop ends it. For a server shared by a
// package's tests (started in TestMain); a single test uses Start.
func Launch(dir, bin string, etcd []string) (*Cluster, error) { return launch(dir, bin, etcd, "") }

func launch(dir, bin string, etcd []string, authz string) (*Cluster, error) {
	files, err := kubeapi.WriteFiles(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		srv := kubeapi.APIServer{Bin: bin, Files: files, Etcd: etcd, Port: port, Authorization: authz}
		c := &Cluster{Bin: bin, Files: files, URL: srv.URL(), EtcdEndpoints: etcd, dir: dir,
			Kubeconfig: filepath.Join(dir, "kubeconfig")}
		if err := files.WriteKubeconfig(c.Kubeconfig, c.URL); err != nil {
			return nil, err
		}
		if lastErr = c.run("kube-apiserver", srv.Argv()); lastErr != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		lastErr = kubeapi.WaitReady(ctx, c.URL, files, nil, nil)
		cancel()
		if lastErr != nil {
			lastErr = fmt.Errorf("%w\n%s", lastErr, c.Log("kube-apiserver"))
			c.Stop()
			continue
		}
		if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
			c.Stop()
			return nil, err
		}
		c.Config.QPS, c.Config.Burst = 1000, 2000
		if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
			c.Stop()
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("starting kube-apiserver: %w", lastErr)
}

// StartControllerManager runs kube-controller-manager against the
// cluster until Stop: it finalises deleted namespaces and creates each
// namespace's default service account.
func (c *Cluster) StartControllerManager() error {
	return c.run("kube-controller-manager", kubeapi.ControllerManager(c.Bin, c.Kubeconfig))
}

// Stop ends every process of the cluster (not its etcd) and waits for
// them.
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i]()
	}
}

// run starts argv with its output in dir/<name>.log; Stop ends it.
func (c *Cluster) run(name string, argv []string) error {
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
	c.mu.Lock()
	c.procs = append(c.procs, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	c.mu.Unlock()
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

// Shared starts what a package's tests share (call it from TestMain): an
// embedded etcd, a kube-apiserver and a kube-controller-manager, all in
// dir; Stop ends them. The binaries come from PALISADE_KUBE_BIN or the
// kube-tools cache; ErrNoBinaries says they are not there.
func Shared(dir string) (*Cluster, error) {
	bin := os.Getenv(kubeapi.BinEnv)
	if bin == "" {
		bin = kubeapi.DefaultBinDir()
		if err := kubeapi.CheckBinDir(bin); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoBinaries, err)
		}
	} else if err := kubeapi.CheckBinDir(bin); err != nil {
		return nil, err // asked for and missing: a failure, not a skip
	}
	srv, err := embedded.Start(context.Background(), embedded.Config{Name: "kube", DataDir: filepath.Join(dir, "etcd"),
		ClientURLs: []string{"http://127.0.0.1:0"}, PeerURLs: []string{"http://127.0.0.1:0"},
		TickMs: 10, ElectionMs: 100, UnsafeNoFsync: true})
	if err != nil {
		return nil, fmt.Errorf("starting the API server's etcd: %w", err)
	}
	c, err := Launch(dir, bin, srv.Endpoints())
	if err != nil {
		srv.Close()
		return nil, err
	}
	c.mu.Lock()
	c.procs = append([]func(){srv.Close}, c.procs...)
	c.mu.Unlock()
	if err := c.StartControllerManager(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// ErrNoBinaries says the Kubernetes binaries are not built and nobody
// asked for them (PALISADE_KUBE_BIN unset): tests skip.
var ErrNoBinaries = errors.New("no Kubernetes binaries")
