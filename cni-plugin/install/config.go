// Package install is install-cni's one job: put the CNI plugins, their
// network configuration and a kubeconfig for them onto the host, read as
// Calico's install reads them (the same environment, the same
// placeholders, the same paths in the container), and keep the kubeconfig
// current while the ServiceAccount token it carries rotates.
package install

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Paths inside the container (under Config.Root), as Calico's manifest
// mounts them.
const (
	SourceBinDir    = "/opt/cni/bin"
	HostBinDir      = "/host/opt/cni/bin"
	SecondaryBinDir = "/host/secondary-bin-dir"
	HostNetDir      = "/host/etc/cni/net.d"
	ServiceAccount  = "/var/run/secrets/kubernetes.io/serviceaccount"
	// KubeconfigName is the kubeconfig's file name in the net.d directory.
	KubeconfigName = "calico-kubeconfig"
	// TLSDirName is where the etcd certificates go in the net.d directory.
	TLSDirName = "calico-tls"
)

// Config is what install-cni does, from its environment.
type Config struct {
	// Root prefixes every path in the container ("" or "/" in a pod; a
	// temporary directory in tests).
	Root string
	// NetDir is the host's CNI configuration directory as the plugin sees
	// it (CNI_NET_DIR, default /etc/cni/net.d): the paths written into the
	// conflist start with it.
	NetDir string
	// ConfName is the conflist's name (CNI_CONF_NAME); OldConfName a
	// previous name removed once it is written (CNI_OLD_CONF_NAME).
	ConfName, OldConfName string
	// NetworkConfig is the conflist template (CNI_NETWORK_CONFIG, or the
	// file CNI_NETWORK_CONFIG_FILE); empty means DefaultNetworkConfig.
	NetworkConfig string
	// TLSAssetsDir holds etcd-ca, etcd-cert and etcd-key (TLS_ASSETS_DIR,
	// default /calico-secrets), copied to <net.d>/calico-tls.
	TLSAssetsDir string
	// SkipBinaries are not installed (SKIP_CNI_BINARIES); with
	// UpdateBinaries false (UPDATE_CNI_BINARIES) binaries already on the
	// host are left as they are.
	SkipBinaries   []string
	UpdateBinaries bool
	// Sleep keeps install-cni running after the install (SLEEP, default
	// true), rewriting the kubeconfig when the token or the CA changes and
	// the certificates when the secret does, every PollInterval.
	Sleep        bool
	PollInterval time.Duration
	// Placeholder values.
	NodeName, MTU, EtcdEndpoints, DatastoreType        string
	LogLevel, LogFilePath                              string
	LogFileMaxSize, LogFileMaxAge, LogFileMaxCount     string
	KubernetesHost, KubernetesPort, KubernetesProtocol string
	SkipTLSVerify                                      bool
}

// DefaultNetworkConfig is the conflist written when no template is given:
// the calico plugin with calico-ipam, in Kubernetes mode, against etcd.
const DefaultNetworkConfig = `{
  "name": "k8s-pod-network",
  "cniVersion": "1.0.0",
  "plugins": [
    {
      "type": "calico",
      "log_level": "__LOG_LEVEL__",
      "log_file_path": "__LOG_FILE_PATH__",
      "datastore_type": "__DATASTORE_TYPE__",
      "etcd_endpoints": "__ETCD_ENDPOINTS__",
      "etcd_key_file": "__ETCD_KEY_FILE__",
      "etcd_cert_file": "__ETCD_CERT_FILE__",
      "etcd_ca_cert_file": "__ETCD_CA_CERT_FILE__",
      "nodename": "__KUBERNETES_NODE_NAME__",
      "mtu": __CNI_MTU__,
      "ipam": {"type": "calico-ipam"},
      "policy": {"type": "k8s"},
      "kubernetes": {"kubeconfig": "__KUBECONFIG_FILEPATH__"}
    }
  ]
}`

// FromEnv reads the configuration from the environment, with Calico's
// names and defaults (DATASTORE_TYPE defaults to etcdv3: Palisade keeps
// its state in etcd). root prefixes the container paths.
func FromEnv(getenv func(string) string, root string) (Config, error) {
	get := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	boolean := func(name string, def bool) (bool, error) {
		v := getenv(name)
		if v == "" {
			return def, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s %q: want true or false", name, v)
		}
		return b, nil
	}
	c := Config{
		Root:               root,
		NetDir:             get("CNI_NET_DIR", "/etc/cni/net.d"),
		ConfName:           get("CNI_CONF_NAME", "10-calico.conflist"),
		OldConfName:        get("CNI_OLD_CONF_NAME", "10-calico.conflist"),
		NetworkConfig:      getenv("CNI_NETWORK_CONFIG"),
		TLSAssetsDir:       get("TLS_ASSETS_DIR", "/calico-secrets"),
		PollInterval:       time.Second,
		MTU:                get("CNI_MTU", "1500"),
		EtcdEndpoints:      getenv("ETCD_ENDPOINTS"),
		DatastoreType:      get("DATASTORE_TYPE", "etcdv3"),
		LogLevel:           get("LOG_LEVEL", "info"),
		LogFilePath:        get("LOG_FILE_PATH", "/var/log/calico/cni/cni.log"),
		LogFileMaxSize:     get("LOG_FILE_MAX_SIZE", "100"),
		LogFileMaxAge:      get("LOG_FILE_MAX_AGE", "30"),
		LogFileMaxCount:    get("LOG_FILE_MAX_COUNT", "10"),
		KubernetesHost:     getenv("KUBERNETES_SERVICE_HOST"),
		KubernetesPort:     getenv("KUBERNETES_SERVICE_PORT"),
		KubernetesProtocol: get("KUBERNETES_SERVICE_PROTOCOL", "https"),
	}
	if f := getenv("CNI_NETWORK_CONFIG_FILE"); f != "" {
		b, err := os.ReadFile(c.path(f))
		if err != nil {
			return c, fmt.Errorf("CNI_NETWORK_CONFIG_FILE: %w", err)
		}
		c.NetworkConfig = string(b)
	}
	for _, b := range strings.Split(getenv("SKIP_CNI_BINARIES"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.SkipBinaries = append(c.SkipBinaries, b)
		}
	}
	var err error
	if c.UpdateBinaries, err = boolean("UPDATE_CNI_BINARIES", true); err != nil {
		return c, err
	}
	if c.Sleep, err = boolean("SLEEP", true); err != nil {
		return c, err
	}
	if c.SkipTLSVerify, err = boolean("SKIP_TLS_VERIFY", false); err != nil {
		return c, err
	}
	if c.NodeName = getenv("KUBERNETES_NODE_NAME"); c.NodeName == "" {
		if c.NodeName, err = os.Hostname(); err != nil {
			return c, fmt.Errorf("KUBERNETES_NODE_NAME is not set and the host name cannot be read: %w", err)
		}
	}
	if _, err := strconv.Atoi(c.MTU); err != nil {
		return c, fmt.Errorf("CNI_MTU %q: not a number", c.MTU)
	}
	return c, nil
}

// path is a container path under Root.
func (c Config) path(p string) string {
	if c.Root == "" || c.Root == "/" {
		return p
	}
	return strings.TrimSuffix(c.Root, "/") + p
}
