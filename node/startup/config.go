package startup

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/palisade-net/palisade/libcalico/api/numorstring"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// Defaults of the startup configuration.
const (
	DefaultNodenameFile = "/var/lib/calico/nodename"
	DefaultIPv4PoolCIDR = "192.168.0.0/16"
	DefaultIPv4PoolName = "default-ipv4-ippool"
	DefaultIPv6PoolName = "default-ipv6-ippool"
)

// Networking backends (CALICO_NETWORKING_BACKEND).
const (
	// BackendBIRD is Calico's default; here it means the embedded GoBGP,
	// so Calico manifests work unchanged.
	BackendBIRD  = "bird"
	BackendGoBGP = "gobgp"
	BackendVXLAN = "vxlan"
	BackendNone  = "none"
)

// Address modes of IP and IP6 besides an explicit address.
const (
	AddressAutodetect = "autodetect"
	AddressNone       = "none"
)

// Config is the startup configuration, read from the environment by
// FromEnv (flags of calico-node override its fields).
type Config struct {
	// NodeName names the Node resource (NODENAME, else HOSTNAME, else
	// the host name).
	NodeName string
	// NodenameFile is where the node name is written for the CNI plugin.
	NodenameFile string
	// IP and IP6 are an address with or without prefix length,
	// "autodetect", "none" or empty (keep the stored address, else
	// autodetect; IP6 empty means none).
	IP, IP6 string
	// IPMethod and IP6Method are the autodetection methods
	// (IP_AUTODETECTION_METHOD, IP6_AUTODETECTION_METHOD).
	IPMethod, IP6Method string
	// AS is the node's AS number; empty keeps the stored one (or the
	// cluster's).
	AS string
	// Backend is the networking backend (bird, gobgp, vxlan, none).
	Backend string
	// ClusterType is written into ClusterInformation (CLUSTER_TYPE).
	ClusterType string
	// NoDefaultPools stops the default pools being created.
	NoDefaultPools bool
	// IPv4Pool and IPv6Pool describe the default pools. IPv6Pool.CIDR empty
	// means no default IPv6 pool.
	IPv4Pool, IPv6Pool PoolConfig
	// SkipSysctls leaves the forwarding sysctls alone.
	SkipSysctls bool
	// K8sNodeRef is the node's Kubernetes name (CALICO_K8S_NODE_REF, as
	// Calico's DaemonSet sets it from spec.nodeName): written as the
	// Node's k8s orchRef, which calico-kube-controllers' node controller
	// follows.
	K8sNodeRef string
}

// PoolConfig describes one default pool.
type PoolConfig struct {
	CIDR         string
	BlockSize    int
	NATOutgoing  bool
	VXLANMode    v3.EncapMode
	IPIPMode     v3.EncapMode
	NodeSelector string
}

// FromEnv reads the configuration Calico's calico-node reads from its
// environment. It checks the values it can check alone; Validate checks
// the whole.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		NodeName:     getenv("NODENAME"),
		NodenameFile: getenv("CALICO_NODENAME_FILE"),
		IP:           getenv("IP"),
		IP6:          getenv("IP6"),
		IPMethod:     getenv("IP_AUTODETECTION_METHOD"),
		IP6Method:    getenv("IP6_AUTODETECTION_METHOD"),
		AS:           getenv("AS"),
		Backend:      getenv("CALICO_NETWORKING_BACKEND"),
		ClusterType:  getenv("CLUSTER_TYPE"),
		K8sNodeRef:   getenv("CALICO_K8S_NODE_REF"),
	}
	if c.NodeName == "" {
		c.NodeName = getenv("HOSTNAME")
	}
	var err error
	if c.NoDefaultPools, err = envBool(getenv, "NO_DEFAULT_POOLS", false); err != nil {
		return c, err
	}
	if c.SkipSysctls, err = envBool(getenv, "CALICO_SKIP_SYSCTLS", false); err != nil {
		return c, err
	}
	if c.Backend == "" {
		c.Backend = BackendBIRD
	}
	vxlanDefault := v3.EncapNever
	if c.Backend == BackendVXLAN {
		vxlanDefault = v3.EncapAlways
	}
	if c.IPv4Pool, err = poolFromEnv(getenv, "CALICO_IPV4POOL_", DefaultIPv4PoolCIDR, v3.DefaultIPv4BlockSize, true, vxlanDefault); err != nil {
		return c, err
	}
	if c.IPv6Pool, err = poolFromEnv(getenv, "CALICO_IPV6POOL_", "", v3.DefaultIPv6BlockSize, false, vxlanDefault); err != nil {
		return c, err
	}
	return c, nil
}

func poolFromEnv(getenv func(string) string, prefix, cidr string, block int, nat bool, vxlan v3.EncapMode) (PoolConfig, error) {
	p := PoolConfig{CIDR: cidr, BlockSize: block, NATOutgoing: nat, VXLANMode: vxlan, IPIPMode: v3.EncapNever,
		NodeSelector: getenv(prefix + "NODE_SELECTOR")}
	if v := getenv(prefix + "CIDR"); v != "" {
		p.CIDR = v
	}
	if v := getenv(prefix + "BLOCK_SIZE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return p, fmt.Errorf("%sBLOCK_SIZE %q: not a number", prefix, v)
		}
		p.BlockSize = n
	}
	var err error
	if p.NATOutgoing, err = envBool(getenv, prefix+"NAT_OUTGOING", nat); err != nil {
		return p, err
	}
	if p.VXLANMode, err = envEncap(getenv, prefix+"VXLAN", p.VXLANMode); err != nil {
		return p, err
	}
	if p.IPIPMode, err = envEncap(getenv, prefix+"IPIP", p.IPIPMode); err != nil {
		return p, err
	}
	return p, nil
}

func envBool(getenv func(string) string, name string, def bool) (bool, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(strings.ToLower(v))
	if err != nil {
		return def, fmt.Errorf("%s %q: want true or false", name, v)
	}
	return b, nil
}

func envEncap(getenv func(string) string, name string, def v3.EncapMode) (v3.EncapMode, error) {
	v := getenv(name)
	switch strings.ToLower(v) {
	case "":
		return def, nil
	case "always":
		return v3.EncapAlways, nil
	case "crosssubnet", "cross-subnet":
		return v3.EncapCrossSubnet, nil
	case "never", "off":
		return v3.EncapNever, nil
	}
	return def, fmt.Errorf("%s %q: want Always, CrossSubnet or Never", name, v)
}

// Validate checks the configuration as a whole and fills in what is left
// to the host (the node name).
func (c *Config) Validate() error {
	if c.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("no NODENAME and no host name: %w", err)
		}
		c.NodeName = h
	}
	c.NodeName = strings.ToLower(strings.TrimSpace(c.NodeName))
	if c.NodenameFile == "" {
		c.NodenameFile = DefaultNodenameFile
	}
	switch c.Backend {
	case "":
		c.Backend = BackendBIRD
	case BackendBIRD, BackendGoBGP, BackendVXLAN, BackendNone:
	default:
		return fmt.Errorf("CALICO_NETWORKING_BACKEND %q: want bird, gobgp, vxlan or none", c.Backend)
	}
	if c.AS != "" {
		if _, err := numorstring.ASNumberFromString(c.AS); err != nil {
			return fmt.Errorf("AS %q: %w", c.AS, err)
		}
	}
	if err := checkAddressSetting("IP", c.IP, false); err != nil {
		return err
	}
	if err := checkAddressSetting("IP6", c.IP6, true); err != nil {
		return err
	}
	for name, m := range map[string]string{"IP_AUTODETECTION_METHOD": c.IPMethod, "IP6_AUTODETECTION_METHOD": c.IP6Method} {
		if _, err := ParseMethod(m); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// BGPEnabled says whether the backend runs BGP.
func (c *Config) BGPEnabled() bool {
	return c.Backend == BackendBIRD || c.Backend == BackendGoBGP
}

// checkAddressSetting checks an IP or IP6 value.
func checkAddressSetting(name, v string, v6 bool) error {
	switch strings.ToLower(v) {
	case "", AddressAutodetect, AddressNone:
		return nil
	}
	p, err := parseAddress(v)
	if err != nil {
		return fmt.Errorf("%s %q: want an address (with or without prefix length), autodetect or none", name, v)
	}
	if p.Addr().Is6() != v6 {
		want := "an IPv4"
		if v6 {
			want = "an IPv6"
		}
		return fmt.Errorf("%s %q: want %s address", name, v, want)
	}
	return nil
}

// parseAddress reads "a.b.c.d" or "a.b.c.d/n"; an address without prefix
// gets the host-length prefix and Bits() tells it apart by IsSingleIP.
func parseAddress(v string) (netip.Prefix, error) {
	if strings.Contains(v, "/") {
		return netip.ParsePrefix(v)
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
