package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// tlsAssets are the etcd certificate files of the secret, as Calico names
// them, with the placeholders that point at their copies on the host.
var tlsAssets = []struct{ name, placeholder string }{
	{"etcd-ca", "__ETCD_CA_CERT_FILE__"},
	{"etcd-cert", "__ETCD_CERT_FILE__"},
	{"etcd-key", "__ETCD_KEY_FILE__"},
}

// Run installs, then (with Sleep) keeps the kubeconfig and the etcd
// certificates current until ctx ends.
func (c Config) Run(ctx context.Context) error {
	if err := c.Install(); err != nil {
		return err
	}
	if !c.Sleep {
		log.Info("Done configuring CNI; SLEEP=false, exiting")
		return nil
	}
	log.WithField("interval", c.PollInterval).Info("Done configuring CNI; watching the ServiceAccount token and the etcd certificates")
	t := time.NewTicker(c.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := c.Refresh(); err != nil {
			// A half-rotated secret or a token being replaced: the file
			// on the host stays as it was, and the next tick tries again.
			log.WithError(err).Warn("Refreshing the CNI credentials failed; retrying")
		}
	}
}

// Install writes, in this order, the binaries, the etcd certificates, the
// kubeconfig and last the conflist (a runtime that sees the conflist finds
// everything it names). The conflist and the kubeconfig are made first, so
// a bad template or a missing token writes nothing. Every file is written
// to a temporary name and renamed into place, so a plugin running
// meanwhile reads the old file or the new, never half of one.
func (c Config) Install() error {
	conf, err := c.Render()
	if err != nil {
		return err
	}
	if c.hasToken() {
		if _, err := c.Kubeconfig(); err != nil {
			return err
		}
	}
	if err := c.installBinaries(); err != nil {
		return err
	}
	if _, err := c.installTLS(); err != nil {
		return err
	}
	if _, err := c.writeKubeconfig(); err != nil {
		return err
	}
	confPath := filepath.Join(c.path(HostNetDir), c.ConfName)
	if err := writeAtomic(confPath, conf, 0o644); err != nil {
		return fmt.Errorf("writing the CNI network configuration: %w", err)
	}
	log.WithField("file", confPath).Info("Wrote the CNI network configuration")
	if c.OldConfName != "" && c.OldConfName != c.ConfName {
		old := filepath.Join(c.path(HostNetDir), c.OldConfName)
		if err := os.Remove(old); err == nil {
			log.WithField("file", old).Info("Removed the old CNI network configuration")
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the old CNI network configuration: %w", err)
		}
	}
	return nil
}

// hasToken says whether the pod's ServiceAccount token is mounted (it
// is not outside Kubernetes).
func (c Config) hasToken() bool {
	_, err := os.Stat(c.path(ServiceAccount + "/token"))
	return err == nil
}

// Refresh rewrites the kubeconfig and the etcd certificates when what
// they are made from changed.
func (c Config) Refresh() error {
	changed, err := c.installTLS()
	if err != nil {
		return err
	}
	if changed {
		log.Info("Updated the etcd certificates on the host: the secret changed")
	}
	if changed, err = c.writeKubeconfig(); err != nil {
		return err
	}
	if changed {
		log.Info("Updated the CNI kubeconfig: the ServiceAccount token or CA changed")
	}
	return nil
}

func (c Config) installBinaries() error {
	src := c.path(SourceBinDir)
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("reading the CNI binaries to install: %w", err)
	}
	written := false
	for _, dir := range []string{c.path(HostBinDir), c.path(SecondaryBinDir)} {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			log.WithField("dir", dir).Debug("Not mounted; skipping")
			continue
		}
		for _, e := range entries {
			if e.IsDir() || slices.Contains(c.SkipBinaries, e.Name()) {
				continue
			}
			dst := filepath.Join(dir, e.Name())
			if _, err := os.Stat(dst); err == nil && !c.UpdateBinaries {
				log.WithField("file", dst).Info("Present and UPDATE_CNI_BINARIES=false; left as it is")
				continue
			}
			data, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				return fmt.Errorf("reading %s: %w", e.Name(), err)
			}
			if err := writeAtomic(dst, data, 0o755); err != nil {
				return fmt.Errorf("installing %s: %w", dst, err)
			}
			log.WithField("file", dst).Info("Installed")
		}
		written = true
	}
	if !written {
		return fmt.Errorf("no CNI bin directory to install into: mount the host's at %s", c.path(HostBinDir))
	}
	return nil
}

// installTLS copies the etcd certificates present in TLSAssetsDir to
// <net.d>/calico-tls (directory 0700, files 0600) and reports whether any
// changed.
func (c Config) installTLS() (bool, error) {
	changed := false
	dst := filepath.Join(c.path(HostNetDir), TLSDirName)
	for _, a := range tlsAssets {
		data, err := os.ReadFile(filepath.Join(c.path(c.TLSAssetsDir), a.name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return changed, fmt.Errorf("reading the etcd certificate %s: %w", a.name, err)
		}
		if err := os.MkdirAll(dst, 0o700); err != nil {
			return changed, err
		}
		target := filepath.Join(dst, a.name)
		if old, err := os.ReadFile(target); err == nil && bytes.Equal(old, data) {
			continue
		}
		if err := writeAtomic(target, data, 0o600); err != nil {
			return changed, fmt.Errorf("installing %s: %w", target, err)
		}
		changed = true
	}
	return changed, nil
}

// placeholder matches what is left of a template's placeholders.
var placeholder = regexp.MustCompile(`__[A-Z0-9_]+__`)

// Render returns the conflist: the template with its placeholders
// replaced. A placeholder Palisade does not fill, or a result that is not
// a JSON object, is an error naming it.
func (c Config) Render() ([]byte, error) {
	tmpl := c.NetworkConfig
	if tmpl == "" {
		tmpl = DefaultNetworkConfig
	}
	if strings.Contains(tmpl, "__SERVICEACCOUNT_TOKEN__") {
		return nil, fmt.Errorf("CNI network config: __SERVICEACCOUNT_TOKEN__ would put the token in the conflist, where it is readable by all and never rotated; use __KUBECONFIG_FILEPATH__")
	}
	if strings.Contains(tmpl, "__KUBECONFIG_FILEPATH__") && !c.hasToken() {
		return nil, fmt.Errorf("CNI network config names __KUBECONFIG_FILEPATH__ but there is no ServiceAccount token at %s to write it from", c.path(ServiceAccount+"/token"))
	}
	repl := []string{
		"__LOG_LEVEL__", c.LogLevel,
		"__LOG_FILE_PATH__", c.LogFilePath,
		"__LOG_FILE_MAX_SIZE__", c.LogFileMaxSize,
		"__LOG_FILE_MAX_AGE__", c.LogFileMaxAge,
		"__LOG_FILE_MAX_COUNT__", c.LogFileMaxCount,
		"__DATASTORE_TYPE__", c.DatastoreType,
		"__KUBERNETES_NODE_NAME__", c.NodeName,
		"__KUBECONFIG_FILEPATH__", filepath.Join(c.NetDir, KubeconfigName),
		"__CNI_MTU__", c.MTU,
		"__KUBERNETES_SERVICE_HOST__", c.KubernetesHost,
		"__KUBERNETES_SERVICE_PORT__", c.KubernetesPort,
		"__ETCD_ENDPOINTS__", c.EtcdEndpoints,
	}
	for _, a := range tlsAssets {
		v := ""
		if _, err := os.Stat(filepath.Join(c.path(c.TLSAssetsDir), a.name)); err == nil {
			v = filepath.Join(c.NetDir, TLSDirName, a.name)
		}
		repl = append(repl, a.placeholder, v)
	}
	out := strings.NewReplacer(repl...).Replace(tmpl)
	if left := placeholder.FindAllString(out, -1); len(left) > 0 {
		return nil, fmt.Errorf("CNI network config: placeholder %s is not one install-cni fills", strings.Join(slices.Compact(left), ", "))
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		return nil, fmt.Errorf("CNI network config is not a JSON object once filled in: %w\n%s", err, out)
	}
	return []byte(out), nil
}

// Kubeconfig returns the plugin's kubeconfig: the API server named by
// KUBERNETES_SERVICE_HOST and _PORT, the ServiceAccount's CA, and its
// current token.
func (c Config) Kubeconfig() ([]byte, error) {
	sa := c.path(ServiceAccount)
	token, err := os.ReadFile(sa + "/token")
	if err != nil {
		return nil, fmt.Errorf("reading the ServiceAccount token: %w", err)
	}
	token = bytes.TrimSpace(token)
	if len(token) == 0 {
		return nil, fmt.Errorf("the ServiceAccount token %s is empty", sa+"/token")
	}
	if c.KubernetesHost == "" || c.KubernetesPort == "" {
		return nil, fmt.Errorf("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set (Kubernetes sets them in every pod)")
	}
	cluster := &clientcmdapi.Cluster{Server: c.KubernetesProtocol + "://" + net.JoinHostPort(c.KubernetesHost, c.KubernetesPort)}
	if c.SkipTLSVerify {
		cluster.InsecureSkipTLSVerify = true
	} else if cluster.CertificateAuthorityData, err = os.ReadFile(sa + "/ca.crt"); err != nil {
		return nil, fmt.Errorf("reading the ServiceAccount CA: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = cluster
	cfg.AuthInfos["calico"] = &clientcmdapi.AuthInfo{Token: string(token)}
	cfg.Contexts["calico-context"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "calico"}
	cfg.CurrentContext = "calico-context"
	return clientcmd.Write(*cfg)
}

// writeKubeconfig writes the kubeconfig (mode 0600: it holds the token)
// when it differs from the one on the host, and says whether it did.
func (c Config) writeKubeconfig() (bool, error) {
	if !c.hasToken() {
		log.Info("No ServiceAccount token: not running in a pod, no kubeconfig written")
		return false, nil
	}
	data, err := c.Kubeconfig()
	if err != nil {
		return false, err
	}
	path := filepath.Join(c.path(HostNetDir), KubeconfigName)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := writeAtomic(path, data, 0o600); err != nil {
		return false, fmt.Errorf("writing the CNI kubeconfig: %w", err)
	}
	return true, nil
}

// writeAtomic writes data to a temporary file beside path and renames it
// over path.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
