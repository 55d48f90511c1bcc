package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/palisade-net/palisade/libcalico/endpointstatus"
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
			"nodename_file": l.nodeDir(n.Name, "nodename"), "mtu": 1500,
			"ipam": map[string]any{"type": "calico-ipam"},
			// Like kubelet with Calico's policy setup timeout: ADD returns
			// once felix has the pod's policy in place.
			"policy_setup_timeout_seconds": 5,
			"endpoint_status_dir":          filepath.Join(l.RunDir(n.Name), endpointstatus.DirName),
		}},
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
	c := libcni.NewCNIConfigWithCacheDir([]string{l.st.Options.BinDir}, l.path("cni-cache"), exec)
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

// AddPod creates a pod on a node as kubelet would: a network namespace,
// then the calico CNI plugin run (through libcni) in the node's namespace
// with the pod's Kubernetes identity.
func (l *Lab) AddPod(ctx context.Context, node, namespace, name string) (_ Pod, err error) {
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
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	p := Pod{Node: node, Namespace: namespace, Name: name, ContainerID: hex.EncodeToString(id)}
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
	p.IP, _ = netip.AddrFromSlice(res.IPs[0].Address.IP)
	p.IP = p.IP.Unmap()
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
	l.say("pod %s on %s: %s (CNI ADD %s)", p.Key(), node, p.IP, time.Since(began).Round(time.Millisecond))
	return p, err
}

// DelPod deletes a pod as kubelet would: CNI DEL in its node's namespace,
// then its network namespace.
func (l *Lab) DelPod(ctx context.Context, key string) error {
	p, ok := l.Pod(key)
	if !ok {
		return fmt.Errorf("lab %s: no pod %q", l.st.Name, key)
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
	l.say("pod %s deleted from %s", key, p.Node)
	return l.forgetPod(ctx, p)
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
