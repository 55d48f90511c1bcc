package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/palisade-net/palisade/libcalico/endpointstatus"
	"github.com/palisade-net/palisade/libcalico/names"
)

// cniNetwork is the network name of the lab's CNI configuration, as in
// Calico's manifests.
const cniNetwork = "k8s-pod-network"

// cniConfPath is a node's CNI configuration (its /etc/cni/net.d).
func (l *Lab) cniConfPath(node string) string {
	return l.nodeDir(node, "net.d", "10-calico.conflist")
}

// writeCNIConf writes the conflist the node's "kubelet" uses: the calico
// plugin with calico-ipam, reading the node name from the file
// calico-node writes.
func (l *Lab) writeCNIConf(n Node) error {
	tls := l.etcdClientFiles()
	conf := map[string]any{
		"name": cniNetwork, "cniVersion": "1.0.0",
		"plugins": []map[string]any{{
			"type": "calico", "log_level": "info", "log_file_path": l.nodeDir(n.Name, "cni.log"),
			"datastore_type": "etcdv3", "etcd_endpoints": strings.Join(l.etcdEndpoints(), ","),
			"etcd_ca_cert_file": tls.CA, "etcd_cert_file": tls.ClientCert, "etcd_key_file": tls.ClientKey,
			// No mtu: the plugin takes the pod MTU felix writes beside
			// the nodename file (less the VXLAN overhead with VXLAN).
			"nodename_file": l.nodeDir(n.Name, "nodename"),
			"ipam":          l.cniIPAM(n),
			// Like kubelet with Calico's policy setup timeout: ADD returns
			// once felix has the pod's policy in place.
			"policy_setup_timeout_seconds": 5,
			"endpoint_status_dir":          filepath.Join(l.RunDir(n.Name), endpointstatus.DirName),
		}},
	}
	if l.st.Options.Kubernetes {
		// Calico's manifests: the plugin reads each pod from the API.
		plugin := conf["plugins"].([]map[string]any)[0]
		plugin["kubernetes"] = map[string]any{"kubeconfig": l.KubeconfigPath()}
		plugin["policy"] = map[string]any{"type": "k8s"}
	}
	if l.st.Options.FloatingIPs {
		conf["plugins"].([]map[string]any)[0]["feature_control"] = map[string]any{"floating_ips": true}
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	path := l.cniConfPath(n.Name)
	if err := os.MkdirAll(strings.TrimSuffix(path, "/10-calico.conflist"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// cni runs fn with libcni set up as the node's kubelet has it: the lab's
// plugins, the lab's result cache, and the plugins' standard error (their
// log lines) appended to the node's cni.log; fn runs in the node's
// namespace, so the plugins do too.
func (l *Lab) cni(n Node, fn func(c *libcni.CNIConfig) error) error {
	f, err := os.OpenFile(l.nodeDir(n.Name, "cni.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: f}, PluginDecoder: version.PluginDecoder{}}
	path := []string{l.st.Options.BinDir}
	if l.st.Options.HostLocal {
		path = append(path, "/usr/lib/cni") // host-local
	}
	c := libcni.NewCNIConfigWithCacheDir(path, l.path("cni-cache"), exec)
	return inNS(n.NS, func() error { return fn(c) })
}

func (p Pod) runtimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: p.ContainerID, NetNS: nsPath(p.NS), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.Namespace}, {"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.ContainerID}},
	}
}

var (
	k8sNamespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	k8sPodRE       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)
)

// ParsePodKey splits "namespace/name" and checks both.
func ParsePodKey(key string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(key, "/")
	if !ok {
		return "", "", fmt.Errorf("pod %q: want namespace/name", key)
	}
	if !k8sNamespaceRE.MatchString(namespace) {
		return "", "", fmt.Errorf("pod %q: namespace %q is not a DNS label", key, namespace)
	}
	if !k8sPodRE.MatchString(name) {
		return "", "", fmt.Errorf("pod %q: name %q is not a DNS name", key, name)
	}
	return namespace, name, nil
}

// PodOptions are what a pod is made with beside its node and name.
type PodOptions struct {
	// Labels are the pod's labels (with Kubernetes, the Pod's; without,
	// its WorkloadEndpoint's).
	Labels map[string]string
	// Serve starts a server in the pod answering on these ports; with
	// Kubernetes each is also a named container port of the Pod
	// (serve-<port>-<protocol>).
	Serve []ServePort
	// IP asks for this address (the pod's cni.projectcalico.org/ipAddrs
	// annotation; Kubernetes only).
	IP netip.Addr
	// Annotations are set on the Pod object before the CNI ADD
	// (Kubernetes only): cni.projectcalico.org/ipReleasePolicy, say.
	Annotations map[string]string
	// Owner is the workload that owns the pod (Kubernetes only): the
	// StatefulSet is created when missing and the pod gets the controller
	// ownerReference its controller would set (see ParseOwner).
	Owner Owner
}

// AddPod creates a pod with no labels and no server.
func (l *Lab) AddPod(ctx context.Context, node, namespace, name string) (Pod, error) {
	return l.AddPodWith(ctx, node, namespace, name, PodOptions{})
}

// AddPodWith creates a pod on a node as kubelet would: with Kubernetes
// the Pod object first (spec.nodeName set, as the scheduler leaves it),
// then a network namespace and the calico CNI plugin run (through
// libcni) in the node's namespace with the pod's identity, then (with
// Kubernetes) the Pod's status written with its address. Its server, if
// any, starts last. A failure removes what was made.
func (l *Lab) AddPodWith(ctx context.Context, node, namespace, name string, o PodOptions) (_ Pod, err error) {
	n, ok := l.Node(node)
	if !ok {
		return Pod{}, fmt.Errorf("lab %s: no node %q", l.st.Name, node)
	}
	if _, _, err := ParsePodKey(namespace + "/" + name); err != nil {
		return Pod{}, err
	}
	if _, ok := l.Pod(namespace + "/" + name); ok {
		return Pod{}, fmt.Errorf("lab %s: pod %s/%s already exists", l.st.Name, namespace, name)
	}
	kube := l.st.Options.Kubernetes
	if o.IP.IsValid() && !kube {
		return Pod{}, fmt.Errorf("pod %s/%s: --ip asks through the pod's ipAddrs annotation: the lab needs --kubernetes", namespace, name)
	}
	if err := o.check(namespace, name, kube); err != nil {
		return Pod{}, err
	}
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	p := Pod{Node: node, Namespace: namespace, Name: name, ContainerID: hex.EncodeToString(id), Labels: o.Labels, Serve: o.Serve}
	if kube {
		if err := l.createKubePod(ctx, p, n, o); err != nil {
			return Pod{}, err
		}
		defer func() {
			if err != nil {
				_ = l.deleteKubePod(context.Background(), p)
			}
		}()
	}
	if p.NS, err = l.newNS(ctx, "pod-"+namespace+"."+name); err != nil {
		return Pod{}, errors.Join(err, l.forgetNS(ctx, l.st.Prefix+"pod-"+namespace+"."+name))
	}
	list, err := libcni.ConfListFromFile(l.cniConfPath(node))
	if err != nil {
		return Pod{}, errors.Join(err, l.forgetNS(ctx, p.NS))
	}
	began := time.Now()
	var res *types100.Result
	err = l.cni(n, func(c *libcni.CNIConfig) error {
		r, err := c.AddNetworkList(ctx, list, p.runtimeConf())
		if err != nil {
			return err
		}
		res, err = types100.NewResultFromResult(r)
		return err
	})
	if err == nil && (len(res.IPs) == 0) {
		err = errors.New("the CNI result has no address")
	}
	if err != nil {
		_ = l.cni(n, func(c *libcni.CNIConfig) error { return c.DelNetworkList(context.Background(), list, p.runtimeConf()) })
		return Pod{}, errors.Join(fmt.Errorf("pod %s on %s: CNI ADD: %w", p.Key(), node, err), l.forgetNS(ctx, p.NS))
	}
	took := time.Since(began)
	for _, ip := range res.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		if a = a.Unmap(); a.Is4() && !p.IP.IsValid() {
			p.IP = a
		} else if a.Is6() && !p.IP6.IsValid() {
			p.IP6 = a
		}
	}
	undoCNI := func() error {
		return errors.Join(l.cni(n, func(c *libcni.CNIConfig) error { return c.DelNetworkList(context.Background(), list, p.runtimeConf()) }),
			l.forgetNS(context.Background(), p.NS))
	}
	if kube {
		err = l.writePodStatus(ctx, p, n)
	} else if len(o.Labels) > 0 {
		err = l.labelEndpoint(ctx, p, o.Labels)
	}
	if err == nil && len(o.Serve) > 0 {
		err = l.startServer(p)
	}
	if err != nil {
		return Pod{}, errors.Join(err, undoCNI())
	}
	l.mu.Lock()
	l.st.Pods = append(l.st.Pods, p)
	// The pod's namespace is recorded with the pod from now on.
	for i, ns := range l.st.Namespaces {
		if ns == p.NS {
			l.st.Namespaces = append(l.st.Namespaces[:i], l.st.Namespaces[i+1:]...)
			break
		}
	}
	err = l.save()
	l.mu.Unlock()
	l.say("pod %s on %s: %s (CNI ADD %s)", p.Key(), node, p.IP, took.Round(time.Millisecond))
	return p, err
}

// labelEndpoint gives a pod's WorkloadEndpoint labels (a lab without
// Kubernetes, where no Pod carries them).
func (l *Lab) labelEndpoint(ctx context.Context, p Pod, labels map[string]string) error {
	wep := names.WorkloadEndpointName(p.Node, names.OrchestratorKubernetes, p.Name, "eth0")
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if _, err := l.Calicoctl(ctx, p.Node, nil, "label", "workloadendpoint", wep, k+"="+labels[k], "-n", p.Namespace, "--overwrite"); err != nil {
			return fmt.Errorf("pod %s: %w", p.Key(), err)
		}
	}
	return nil
}

// startServer runs the pod's server (this executable, see ServeEnv) in
// its namespace.
func (l *Lab) startServer(p Pod) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var ports []string
	for _, s := range p.Serve {
		ports = append(ports, s.String())
	}
	role := "serve/" + p.Key()
	proc, err := start(p.NS, "server of "+p.Key(), l.path("pods", p.Namespace+"."+p.Name+".log"), []string{exe},
		[]string{ServeEnv + "=" + strings.Join(ports, ","), ServeNameEnv + "=" + p.Key()})
	if err != nil {
		return err
	}
	return l.recordProc(role, proc)
}

// DelPod deletes a pod as kubelet would: its server stopped, CNI DEL in
// its node's namespace, its network namespace, then (with Kubernetes)
// the Pod object.
func (l *Lab) DelPod(ctx context.Context, key string) error {
	p, ok := l.Pod(key)
	if !ok {
		return fmt.Errorf("lab %s: no pod %q", l.st.Name, key)
	}
	if err := l.stopServer(p); err != nil {
		return err
	}
	n, ok := l.Node(p.Node)
	if !ok {
		return l.forgetPod(ctx, p)
	}
	list, err := libcni.ConfListFromFile(l.cniConfPath(p.Node))
	if err != nil {
		return err
	}
	if err := l.cni(n, func(c *libcni.CNIConfig) error { return c.DelNetworkList(ctx, list, p.runtimeConf()) }); err != nil {
		return fmt.Errorf("pod %s on %s: CNI DEL: %w", key, p.Node, err)
	}
	if err := l.forgetPod(ctx, p); err != nil {
		return err
	}
	if l.st.Options.Kubernetes {
		if err := l.deleteKubePod(ctx, p); err != nil {
			return err
		}
	}
	l.say("pod %s deleted from %s", key, p.Node)
	return nil
}

// stopServer stops the pod's server, if it has one.
func (l *Lab) stopServer(p Pod) error {
	role := "serve/" + p.Key()
	proc, ok := l.Proc(role)
	if !ok {
		return nil
	}
	if err := proc.Stop(2 * time.Second); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.st.Procs, role)
	return l.save()
}

// forgetPod deletes a pod's namespace and drops it from the record.
func (l *Lab) forgetPod(ctx context.Context, p Pod) error {
	if err := delNS(ctx, p.NS); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, q := range l.st.Pods {
		if q.Key() == p.Key() {
			l.st.Pods = append(l.st.Pods[:i], l.st.Pods[i+1:]...)
			break
		}
	}
	return l.save()
}
