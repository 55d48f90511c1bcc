package lab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	"github.com/palisade-net/palisade/libcalico/k8s/kubeapi"
)

// This file is a lab's options: the Options type, its choices, and the
// defaults and checks Up applies to them.

// Route reflector kinds (Options.RR).
const (
	RRNone  = "none"
	RRBird2 = "bird2"
	RRBird1 = "bird1"
)

// Etcd placements (Options.Etcd).
const (
	// EtcdEmbedded is the etcd calico-node serves on node 1.
	EtcdEmbedded = "embedded"
	// EtcdExternal is /usr/bin/etcd in its own namespace.
	EtcdExternal = "external"
	// EtcdCluster is three /usr/bin/etcd members, each in its own
	// namespace.
	EtcdCluster = "cluster"
)

// BGP topologies (Options.Peering).
const (
	PeeringMesh = "mesh"
	PeeringRR   = "rr"
	// PeeringNodeRR makes node1 and node2 (node1 alone in a lab of two)
	// in-cluster route reflectors of one cluster (a cluster ID and the
	// label route-reflector=true) that every node peers with, mesh off:
	// Calico's route-reflector guide with calico-nodes as the reflectors.
	PeeringNodeRR = "node-rr"
)

// DefaultStateRoot holds the labs' state directories unless configured
// (PALISADE_LAB_DIR).
const DefaultStateRoot = "/run/palisade-lab"

// MaxNodes is how many nodes fit the fabric's addresses (.11 to .210).
const MaxNodes = 200

// Options configure a lab.
type Options struct {
	// Name is the lab's name ([a-z0-9-], at most 20); its namespaces are
	// called pl-<Name>-…. Empty picks a random one.
	Name string `json:"name"`
	// Nodes is how many nodes Up starts (default 3).
	Nodes int `json:"nodes"`
	// RR is the route reflector: RRBird2, RRBird1 or RRNone (default).
	RR string `json:"rr"`
	// Peering is the initial topology: PeeringRR (the default with a
	// route reflector), PeeringMesh or PeeringNodeRR.
	Peering string `json:"peering"`
	// Border adds a BIRD border router in AS 65001 peering eBGP with
	// every node.
	Border bool `json:"border"`
	// Etcd is EtcdEmbedded (default), EtcdExternal or EtcdCluster. Each is
	// TLS with client certificates; nodes and calicoctl use the join file.
	Etcd string `json:"etcd"`
	// PoolCIDR is the default IPv4 pool (default 10.244.0.0/16).
	PoolCIDR string `json:"poolCIDR"`
	// StateRoot holds the lab's state directory (default
	// $PALISADE_LAB_DIR or DefaultStateRoot).
	StateRoot string `json:"stateRoot"`
	// BinDir holds calico-node, calicoctl, calico and calico-ipam
	// (default $PALISADE_BIN, else the directory of this executable).
	BinDir string `json:"binDir"`
	// Bird1 is BIRD 1.6's binary directory (default .tools/bird1/usr/sbin
	// found upward from the working directory and BinDir).
	Bird1 string `json:"bird1"`
	// BPF turns on felix's eBPF dataplane (FelixConfiguration default
	// bpfEnabled: true) on every node.
	BPF bool `json:"bpf"`
	// FloatingIPs lets pods have floating IPs (docs/floating-ips.md): the
	// CNI configuration's feature_control.floating_ips, FelixConfiguration
	// default floatingIPs: Enabled, and the pool FloatingPoolCIDR to take
	// them from.
	FloatingIPs bool `json:"floatingIPs,omitempty"`
	// HostLocal gives pods their addresses from the reference host-local
	// IPAM plugin (/usr/lib/cni) instead of calico-ipam: node N takes
	// HostLocalSubnet(N), as with host-local's usePodCidr and a node's
	// podCIDR. The lab adds no pool for them: a test applies one.
	HostLocal bool `json:"hostLocal,omitempty"`
	// Metrics turns on felix's health endpoint and Prometheus metrics and
	// the BGP metrics on every node, with Calico's variables
	// (FELIX_HEALTHENABLED, FELIX_PROMETHEUSMETRICSENABLED,
	// BGP_PROMETHEUSMETRICSENABLED): ports 9099, 9091 and 9900 of each
	// node's namespace.
	Metrics bool `json:"metrics"`
	// LogLevel is calico-node's log level (default info).
	LogLevel string `json:"logLevel"`
	// Subnets is 1 (default: every node on br0) or 2: odd nodes in
	// 198.18.0.0/24, even ones in 198.18.1.0/24, joined by a router
	// namespace.
	Subnets int `json:"subnets,omitempty"`
	// Backend is CALICO_NETWORKING_BACKEND: BackendBird (default) or
	// BackendVXLAN (no BGP at all).
	Backend string `json:"backend,omitempty"`
	// VXLAN is the default pools' vxlanMode: VXLANNever (default with
	// BGP), VXLANAlways (default with BackendVXLAN) or VXLANCrossSubnet.
	VXLAN string `json:"vxlan,omitempty"`
	// IPv6 gives nodes IPv6 addresses and adds the IPv6 pool PoolCIDR6;
	// pods get an address of each family.
	IPv6 bool `json:"ipv6,omitempty"`
	// Kubernetes adds a Kubernetes control plane (kube-apiserver with its
	// etcd, kube-controller-manager, calico-kube-controllers): every pod
	// is then a Pod object, wired by the CNI plugin in Kubernetes mode.
	Kubernetes bool `json:"kubernetes"`
	// KubeProxy runs the real kube-proxy (iptables mode) in every node's
	// namespace, watching the lab's API server (needs Kubernetes). With
	// BPF it is off unless asked for: felix's eBPF dataplane replaces it
	// (and removes kube-proxy's rules, bpfKubeProxyIptablesCleanupEnabled
	// left at its default); asked for, it runs beside felix, whose
	// cleanup is then turned off.
	KubeProxy bool `json:"kubeProxy,omitempty"`
	// Kubelet makes every node a real one (implies Kubernetes, and
	// KubeProxy unless BPF; etcd external unless cluster): a containerd and a kubelet
	// in the node's namespaces, kube-scheduler in the control plane, the
	// images of ImagesDir imported into each node's containerd, and
	// Palisade installed from Manifest with kubectl, as docs/install.md
	// says. calico-node runs as the DaemonSet's pods, not as the lab's
	// process.
	Kubelet bool `json:"kubelet,omitempty"`
	// ReferenceCNI (with Kubelet) installs no Palisade: each node's
	// pods get the reference plugins instead (bridge with host-local,
	// 10.88.<index>.0/24 per node, routed between the nodes statically),
	// the baseline benchmarks measure Palisade against on the same nodes.
	ReferenceCNI bool `json:"referenceCNI,omitempty"`
	// ImagesDir holds the OCI image archives `make images` builds
	// (default $PALISADE_IMAGES, else images/ found upward from the
	// working directory and BinDir).
	ImagesDir string `json:"imagesDir,omitempty"`
	// Manifest is the manifest Kubelet installs (default
	// manifests/calico-etcd.yaml found upward from the working directory
	// and BinDir).
	Manifest string `json:"manifest,omitempty"`
	// KubeBinDir holds kube-apiserver, kube-controller-manager, kubectl
	// and kube-proxy (default $PALISADE_KUBE_BIN, else
	// hack/kube-tools.sh's cache).
	KubeBinDir string `json:"kubeBinDir"`
	// Progress receives one line per step; nil prints nothing.
	Progress io.Writer `json:"-"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$`)

// defaults fills in the options and checks them.
func (o *Options) defaults() error {
	if o.Name == "" {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		o.Name = hex.EncodeToString(b)
	}
	if !nameRE.MatchString(o.Name) {
		return fmt.Errorf("lab name %q: want 1-20 of a-z, 0-9 and '-', not starting or ending with '-'", o.Name)
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return fmt.Errorf("lab %q: %d nodes: want 1 to %d", o.Name, o.Nodes, MaxNodes)
	}
	switch o.RR {
	case "":
		o.RR = RRNone
	case RRNone, RRBird2, RRBird1:
	default:
		return fmt.Errorf("lab %q: route reflector %q: want bird2, bird1 or none", o.Name, o.RR)
	}
	switch o.Peering {
	case "":
		o.Peering = PeeringMesh
		if o.RR != RRNone {
			o.Peering = PeeringRR
		}
	case PeeringMesh:
	case PeeringNodeRR:
		if o.Nodes < 2 {
			return fmt.Errorf("lab %q: peering %q needs at least 2 nodes", o.Name, o.Peering)
		}
	case PeeringRR:
		if o.RR == RRNone {
			return fmt.Errorf("lab %q: peering %q needs a route reflector (--rr bird2 or bird1)", o.Name, o.Peering)
		}
	default:
		return fmt.Errorf("lab %q: peering %q: want mesh, rr or node-rr", o.Name, o.Peering)
	}
	if o.Kubelet {
		if err := o.kubeletDefaults(); err != nil {
			return err
		}
	}
	switch o.Etcd {
	case "":
		o.Etcd = EtcdEmbedded
	case EtcdEmbedded, EtcdExternal, EtcdCluster:
	default:
		return fmt.Errorf("lab %q: etcd %q: want embedded, external or cluster", o.Name, o.Etcd)
	}
	if o.PoolCIDR == "" {
		o.PoolCIDR = "10.244.0.0/16"
	}
	if _, err := netip.ParsePrefix(o.PoolCIDR); err != nil {
		return fmt.Errorf("lab %q: pool %q: %w", o.Name, o.PoolCIDR, err)
	}
	o.StateRoot = stateRoot(o.StateRoot)
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir()
	}
	abs, err := filepath.Abs(o.BinDir)
	if err != nil {
		return err
	}
	o.BinDir = abs
	if o.Kubelet {
		if err := o.kubeletPaths(); err != nil {
			return err
		}
	}
	for _, b := range []string{"calico-node", "calicoctl", "calico", "calico-ipam"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("lab %q: %s not found in %s (make build, or set PALISADE_BIN)", o.Name, b, o.BinDir)
		}
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.KubeProxy && !o.Kubernetes {
		return fmt.Errorf("lab %q: --kube-proxy needs --kubernetes (kube-proxy watches the lab's API server)", o.Name)
	}
	if o.Kubernetes {
		o.KubeBinDir = o.kubeBinDir()
		if err := kubeapi.CheckBinDir(o.KubeBinDir); err != nil {
			return fmt.Errorf("lab %q: --kubernetes: %w", o.Name, err)
		}
		if _, err := os.Stat(filepath.Join(o.BinDir, "calico-kube-controllers")); err != nil {
			return fmt.Errorf("lab %q: calico-kube-controllers not found in %s (make build, or set PALISADE_BIN)", o.Name, o.BinDir)
		}
		if _, err := os.Stat(filepath.Join(o.KubeBinDir, "kube-proxy")); o.KubeProxy && err != nil {
			return fmt.Errorf("lab %q: --kube-proxy: kube-proxy not found in %s (hack/kube-tools.sh builds it)", o.Name, o.KubeBinDir)
		}
	}
	return o.overlayDefaults()
}

// kubeletDefaults fills in and checks what real nodes need.
func (o *Options) kubeletDefaults() error {
	// The iptables dataplane does not load-balance Services: real nodes
	// need kube-proxy then.
	o.Kubernetes, o.KubeProxy = true, o.KubeProxy || !o.BPF
	switch o.Etcd {
	case "":
		o.Etcd = EtcdExternal
	case EtcdEmbedded:
		return fmt.Errorf("lab %q: --kubelet with etcd embedded: calico-node runs as a DaemonSet there, so etcd must be outside the nodes (external or cluster)", o.Name)
	}
	return nil
}

// kubeletPaths finds the images, the manifest and the node software
// (after BinDir is known).
func (o *Options) kubeletPaths() error {
	if o.ImagesDir == "" {
		o.ImagesDir = os.Getenv("PALISADE_IMAGES")
	}
	if o.ImagesDir == "" {
		o.ImagesDir = findUp("images", o.BinDir)
	}
	if o.Manifest == "" {
		o.Manifest = findUp(filepath.Join("manifests", "calico-etcd.yaml"), o.BinDir)
	}
	if o.ImagesDir == "" {
		return fmt.Errorf("lab %q: --kubelet: no images directory found (make images, or set PALISADE_IMAGES)", o.Name)
	}
	if o.Manifest == "" {
		return fmt.Errorf("lab %q: --kubelet: manifests/calico-etcd.yaml not found upward from here or %s", o.Name, o.BinDir)
	}
	for _, p := range []*string{&o.ImagesDir, &o.Manifest} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	for _, b := range []string{"containerd", "ctr", "runc", "nsenter", "unshare"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("lab %q: --kubelet: %s is not installed (make deps installs containerd and runc)", o.Name, b)
		}
	}
	return nil
}

// findUp looks for rel upward from the working directory and from dirs,
// returning the first found ("" when none).
func findUp(rel string, dirs ...string) string {
	wd, _ := os.Getwd()
	for _, start := range append([]string{wd}, dirs...) {
		for d := start; d != "" && d != "/"; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, rel)); err == nil {
				return filepath.Join(d, rel)
			}
		}
	}
	return ""
}

// stateRoot resolves the directory holding the labs.
func stateRoot(root string) string {
	if root == "" {
		root = os.Getenv("PALISADE_LAB_DIR")
	}
	if root == "" {
		root = DefaultStateRoot
	}
	return root
}

// DefaultBinDir is $PALISADE_BIN, else the directory of this executable.
func DefaultBinDir() string {
	if d := os.Getenv("PALISADE_BIN"); d != "" {
		return d
	}
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}
