package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/palisade-net/palisade/libcalico/k8s/kubeapi"
)

// The lab's Kubernetes control plane lives in namespace pl-<lab>-kube on
// the fabric: an etcd of its own on loopback, kube-apiserver, a
// kube-controller-manager (namespaces, service accounts) and
// calico-kube-controllers.
var kubeAddr = netip.MustParseAddr("198.18.0.252")

// kubeServiceAddr is the kubernetes Service's address (the first of
// ServiceCIDR), which pods reach the API server by: in its certificate.
var kubeServiceAddr = netip.MustParseAddr("10.96.0.1")

// Ports of the control plane in its namespace.
const (
	kubeAPIPort      = 6443
	kubeHealthPort   = 9094
	kubeEtcdEndpoint = "http://127.0.0.1:2379"
)

// kubeNS is the control plane's namespace.
func (l *Lab) kubeNS() string { return l.st.Prefix + "kube" }

// KubeconfigPath is the kubeconfig of the lab's API server (reachable
// from the nodes and the control plane's namespace).
func (l *Lab) KubeconfigPath() string { return l.path("kube", "kubeconfig") }

// kubeURL is the API server's address on the fabric.
func kubeURL() string {
	return "https://" + netip.AddrPortFrom(kubeAddr, kubeAPIPort).String()
}

// kubeBinDir is where the Kubernetes binaries are.
func (o *Options) kubeBinDir() string {
	if o.KubeBinDir != "" {
		return o.KubeBinDir
	}
	return kubeapi.BinDir()
}

// startKube brings up the control plane and waits for the API server.
func (l *Lab) startKube(ctx context.Context) error {
	o := l.st.Options
	bin := o.KubeBinDir
	l.say("creating the Kubernetes control plane: namespace %s, %s/24, kube-apiserver %s (binaries in %s)", l.kubeNS(), kubeAddr, kubeURL(), bin)
	ns, err := l.attachNS(ctx, "kube", "kube", kubeAddr)
	if err != nil {
		return err
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	argv := []string{etcdBin, "--name", "kube", "--data-dir", l.path("kube", "etcd"),
		"--listen-client-urls", kubeEtcdEndpoint, "--advertise-client-urls", kubeEtcdEndpoint,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "kube=http://127.0.0.1:2380", "--initial-cluster-state", "new",
		"--heartbeat-interval", "20", "--election-timeout", "200", "--log-level", "warn"}
	p, err := start(ns, "kube etcd", l.path("kube", "etcd.log"), argv, env)
	if err != nil {
		return err
	}
	if err := l.recordProc("kube/etcd", p); err != nil {
		return err
	}
	files, err := kubeapi.WriteFiles(l.path("kube", "pki"), kubeAddr, kubeServiceAddr)
	if err != nil {
		return err
	}
	if err := files.WriteKubeconfig(l.KubeconfigPath(), kubeURL()); err != nil {
		return err
	}
	srv := kubeapi.APIServer{Bin: bin, Files: files, Etcd: []string{kubeEtcdEndpoint}, Bind: kubeAddr, Advertise: kubeAddr, Port: kubeAPIPort}
	if o.Kubelet {
		// Real kubelets: node identities, RBAC as a cluster has it (the
		// manifest's roles are what calico-node and the controllers get),
		// and the API server's certificate to the kubelets.
		srv.Nodes, srv.Authorization = true, "Node,RBAC"
		if err := files.EnsureKubeletClient(); err != nil {
			return err
		}
		// The host's resolv.conf, which kubelet gives pods of dnsPolicy
		// Default: empty, so no pod ever asks the machine's resolver.
		if err := os.WriteFile(l.path("kube", "resolv.conf"), []byte("# no resolver: pods have the cluster DNS only\n"), 0o644); err != nil {
			return err
		}
	}
	api, err := start(ns, "kube-apiserver", l.path("kube", "kube-apiserver.log"), srv.Argv(), env)
	if err != nil {
		return err
	}
	if err := l.recordProc("kube/kube-apiserver", api); err != nil {
		return err
	}
	began := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := kubeapi.WaitReady(wctx, kubeURL(), files, api.Alive, l.dialIn(ns)); err != nil {
		return fmt.Errorf("%w\n%s", err, tail(api.Log, 3000))
	}
	l.say("✓ kube-apiserver ready (%s)", time.Since(began).Round(10*time.Millisecond))
	if err := l.installAdminPolicyCRDs(ctx); err != nil {
		return err
	}
	kcmArgv := kubeapi.ControllerManager(bin, l.KubeconfigPath())
	if o.Kubelet {
		kcmArgv = kubeapi.ClusterControllerManager(bin, l.KubeconfigPath(), files, ServiceCIDR)
	}
	kcm, err := start(ns, "kube-controller-manager", l.path("kube", "kube-controller-manager.log"), kcmArgv, env)
	if err != nil {
		return err
	}
	if err := l.recordProc("kube/kube-controller-manager", kcm); err != nil {
		return err
	}
	if !o.Kubelet {
		return nil
	}
	sched, err := start(ns, "kube-scheduler", l.path("kube", "kube-scheduler.log"), kubeapi.Scheduler(bin, l.KubeconfigPath()), env)
	if err != nil {
		return err
	}
	return l.recordProc("kube/kube-scheduler", sched)
}

// dialIn dials from inside a namespace.
func (l *Lab) dialIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNS(ns, func() (err error) {
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// Kube is a client of the lab's API server (nil without Kubernetes).
func (l *Lab) Kube() (kubernetes.Interface, error) {
	if !l.st.Options.Kubernetes {
		return nil, fmt.Errorf("lab %s runs without Kubernetes (lab up --kubernetes)", l.st.Name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kube != nil {
		return l.kube, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.KubeconfigPath())
	if err != nil {
		return nil, err
	}
	cfg.Dial = l.dialIn(l.kubeNS())
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	l.kube = c
	return c, nil
}

// registerKubeNode creates the Kubernetes Node of a lab node, as its
// kubelet would, with the node's address.
func (l *Lab) registerKubeNode(ctx context.Context, n Node) error {
	kc, err := l.Kube()
	if err != nil {
		return err
	}
	obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
		"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP.String()},
			{Type: corev1.NodeHostName, Address: n.Name}}}}
	_, err = kc.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating Kubernetes node %s: %w", n.Name, err)
	}
	return nil
}

// startKubeControllers runs calico-kube-controllers (under the
// supervisor, as a Deployment restarts it) in the control plane's
// namespace and waits until it is ready.
func (l *Lab) startKubeControllers(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the supervisor (this executable): %w", err)
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "KUBECONFIG=" + l.KubeconfigPath(), "LOG_LEVEL=" + l.st.Options.LogLevel,
		fmt.Sprintf("HEALTH_PORT=%d", kubeHealthPort), "POD_NAME=calico-kube-controllers-" + l.st.Name, SuperviseEnv + "=1"}
	for _, e := range l.Env(l.st.Nodes[0].Name) {
		if strings.HasPrefix(e, "ETCD_") || strings.HasPrefix(e, "DATASTORE_TYPE=") {
			env = append(env, e)
		}
	}
	logPath := l.path("kube", "calico-kube-controllers.log")
	l.say("starting calico-kube-controllers (log %s)", logPath)
	p, err := start(l.kubeNS(), "calico-kube-controllers", logPath,
		[]string{exe, filepath.Join(l.st.Options.BinDir, "calico-kube-controllers")}, env)
	if err != nil {
		return err
	}
	if err := l.recordProc("kube/calico-kube-controllers", p); err != nil {
		return err
	}
	return l.waitKubeControllers(ctx, 60*time.Second)
}

// waitKubeControllers waits until calico-kube-controllers reports ready.
func (l *Lab) waitKubeControllers(ctx context.Context, timeout time.Duration) error {
	tr := &http.Transport{DialContext: l.dialIn(l.kubeNS())}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Second}
	url := fmt.Sprintf("http://%s/readiness", netip.AddrPortFrom(kubeAddr, kubeHealthPort))
	began := time.Now()
	var last error
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				l.say("✓ calico-kube-controllers ready (%s)", time.Since(began).Round(10*time.Millisecond))
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		if p, ok := l.Proc("kube/calico-kube-controllers"); !ok || !p.Alive() || time.Since(began) > timeout || ctx.Err() != nil {
			return fmt.Errorf("calico-kube-controllers not ready after %s: %v\n%s", time.Since(began).Round(time.Second), last,
				tail(l.path("kube", "calico-kube-controllers.log"), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kubectl runs the lab's kubectl against its API server, in the control
// plane's namespace, and returns its exit code.
func (l *Lab) Kubectl(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if !l.st.Options.Kubernetes {
		return 0, fmt.Errorf("lab %s runs without Kubernetes (lab up --kubernetes)", l.st.Name)
	}
	argv := append([]string{filepath.Join(l.st.Options.KubeBinDir, "kubectl"), "--kubeconfig", l.KubeconfigPath()}, args...)
	return l.Exec(ctx, "kube", argv, stdin, stdout, stderr)
}

// KubectlOutput runs kubectl with stdin (may be empty) and returns its
// output; a non-zero exit is an error carrying it.
func (l *Lab) KubectlOutput(ctx context.Context, stdin string, args ...string) (string, error) {
	var buf bytes.Buffer
	code, err := l.Kubectl(ctx, args, strings.NewReader(stdin), &buf, &buf)
	if err != nil {
		return buf.String(), err
	}
	if code != 0 {
		return buf.String(), fmt.Errorf("kubectl %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(buf.String()))
	}
	return buf.String(), nil
}
