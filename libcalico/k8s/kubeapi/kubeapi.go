// Package kubeapi runs a real kube-apiserver (and kube-controller-manager)
// for the tests and the lab: the files they need (a CA and serving
// certificate, the service-account signing key, a token file and a
// kubeconfig), their command lines with the flags known to work on these
// machines, and waiting for the API server to be ready. It knows where
// hack/kube-tools.sh caches the binaries.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Version is the Kubernetes release hack/kube-tools.sh builds.
const Version = "v1.37.2"

// BinEnv names the directory of the Kubernetes binaries for tests and the
// lab; `make test` sets it from hack/kube-tools.sh.
const BinEnv = "PALISADE_KUBE_BIN"

// Binaries are the programs hack/kube-tools.sh builds.
var Binaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet", "kubectl"}

// DefaultBinDir is where hack/kube-tools.sh caches the binaries:
// $PALISADE_CACHE, else $XDG_CACHE_HOME/palisade, else
// ~/.cache/palisade, then kube-<Version>.
func DefaultBinDir() string {
	root := os.Getenv("PALISADE_CACHE")
	if root == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		root = filepath.Join(cache, "palisade")
	}
	return filepath.Join(root, "kube-"+Version)
}

// BinDir is $PALISADE_KUBE_BIN, else DefaultBinDir.
func BinDir() string {
	if d := os.Getenv(BinEnv); d != "" {
		return d
	}
	return DefaultBinDir()
}

// CheckBinDir says which binary is missing from dir, if any.
func CheckBinDir(dir string) error {
	for _, b := range Binaries {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not in %s: run hack/kube-tools.sh (make test does) or set %s", b, dir, BinEnv)
		}
	}
	return nil
}

// Files are what the API server and its clients read, in one directory.
type Files struct {
	Dir string
	// CACert signs ServingCert (and the client certificates IssueClient
	// makes, with CAKey); clients trust it.
	CACert, CAKey string
	// ServingCert and ServingKey are the API server's TLS identity.
	ServingCert, ServingKey string
	// SAKey signs and verifies service-account tokens.
	SAKey string
	// TokenFile holds Token for user admin in system:masters.
	TokenFile string
	Token     string
}

// WriteFiles creates the files in dir: a CA, a serving certificate for
// the given addresses (127.0.0.1 and localhost are always included), a
// service-account key and an admin token.
func WriteFiles(dir string, addrs ...netip.Addr) (Files, error) {
	f := FilesIn(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "palisade-test-kubernetes-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	srvTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	for _, a := range addrs {
		srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, a.AsSlice())
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	f.Token = hex.EncodeToString(tok)
	writes := []struct {
		path string
		data []byte
	}{
		{f.CACert, pemBlock("CERTIFICATE", caDER)},
		{f.CAKey, ecPEM(caKey)},
		{f.ServingCert, pemBlock("CERTIFICATE", srvDER)},
		{f.ServingKey, ecPEM(srvKey)},
		{f.SAKey, ecPEM(saKey)},
		{f.TokenFile, []byte(f.Token + ",admin,admin-uid,system:masters\n")},
	}
	for _, w := range writes {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}

// FilesIn names the files WriteFiles makes in dir (Token is not read).
func FilesIn(dir string) Files {
	return Files{Dir: dir, CACert: filepath.Join(dir, "ca.crt"), CAKey: filepath.Join(dir, "ca.key"),
		ServingCert: filepath.Join(dir, "apiserver.crt"), ServingKey: filepath.Join(dir, "apiserver.key"),
		SAKey: filepath.Join(dir, "sa.key"), TokenFile: filepath.Join(dir, "tokens.csv")}
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func ecPEM(k *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(k)
	return pemBlock("EC PRIVATE KEY", der)
}

// Kubeconfig renders a kubeconfig for server with the admin token.
func (f Files) Kubeconfig(server string) []byte {
	return f.kubeconfig(server, "admin", "    token: "+f.Token+"\n")
}

// kubeconfig renders a kubeconfig for server trusting the CA, as user
// with the credential lines given.
func (f Files) kubeconfig(server, user, credential string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `apiVersion: v1
kind: Config
clusters:
- name: palisade
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
%scontexts:
- name: palisade
  context:
    cluster: palisade
    user: %s
current-context: palisade
`, server, f.CACert, user, credential, user)
	return b.Bytes()
}

// WriteKubeconfig writes Kubeconfig(server) to path.
func (f Files) WriteKubeconfig(path, server string) error {
	return os.WriteFile(path, f.Kubeconfig(server), 0o600)
}

// APIServer is how to run one kube-apiserver.
type APIServer struct {
	// Bin is the directory of the Kubernetes binaries.
	Bin   string
	Files Files
	// Etcd lists the etcd client URLs it stores into.
	Etcd []string
	// Bind and Advertise are its addresses (default 127.0.0.1).
	Bind, Advertise netip.Addr
	// Port is its secure port.
	Port int
	// ServiceCIDR is the service cluster IP range (default 10.96.0.0/16).
	ServiceCIDR string
	// Authorization is --authorization-mode (default AlwaysAllow; RBAC
	// for tests of what a ServiceAccount may do; Node,RBAC for real
	// kubelets).
	Authorization string
	// Nodes runs it for real kubelets: the kubernetes Service's endpoints
	// kept by the lease reconciler (pods reach the API server through
	// it), and a client certificate (Files.KubeletClient) for the
	// kubelets' exec, logs and port-forward.
	Nodes bool
}

// URL is where clients reach it.
func (a APIServer) URL() string {
	return "https://" + net.JoinHostPort(a.advertise().String(), strconv.Itoa(a.Port))
}

func (a APIServer) advertise() netip.Addr {
	if a.Advertise.IsValid() {
		return a.Advertise
	}
	if a.Bind.IsValid() && !a.Bind.IsUnspecified() {
		return a.Bind
	}
	return netip.MustParseAddr("127.0.0.1")
}

// Argv is its command line: authentication by the token file, every
// request allowed (unless Authorization says otherwise), no endpoint reconciler (nothing else runs), the lab's
// service range, and the certificates of Files.
func (a APIServer) Argv() []string {
	bind := a.Bind
	if !bind.IsValid() {
		bind = netip.MustParseAddr("127.0.0.1")
	}
	svc := a.ServiceCIDR
	if svc == "" {
		svc = "10.96.0.0/16"
	}
	authz := a.Authorization
	if authz == "" {
		authz = "AlwaysAllow"
	}
	// Without kubelets nothing reaches the API server through its
	// Service, and a lease would only be noise.
	reconciler := "none"
	var nodes []string
	if a.Nodes {
		reconciler = "lease"
		cert, key := a.Files.KubeletClient()
		nodes = []string{"--kubelet-client-certificate=" + cert, "--kubelet-client-key=" + key,
			"--kubelet-preferred-address-types=InternalIP"}
	}
	return append([]string{filepath.Join(a.Bin, "kube-apiserver"),
		"--etcd-servers=" + strings.Join(a.Etcd, ","),
		"--bind-address=" + bind.String(), "--advertise-address=" + a.advertise().String(),
		"--secure-port=" + strconv.Itoa(a.Port), "--endpoint-reconciler-type=" + reconciler,
		"--cert-dir=" + filepath.Join(a.Files.Dir, "certs"),
		"--tls-cert-file=" + a.Files.ServingCert, "--tls-private-key-file=" + a.Files.ServingKey,
		"--client-ca-file=" + a.Files.CACert,
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + a.Files.SAKey,
		"--service-account-signing-key-file=" + a.Files.SAKey, "--token-auth-file=" + a.Files.TokenFile,
		"--authorization-mode=" + authz, "--service-cluster-ip-range=" + svc,
		// As kubeadm sets it: calico-node runs privileged.
		"--allow-privileged=true",
		"--profiling=false", "--enable-priority-and-fairness=false", "--event-ttl=5m",
	}, nodes...)
}

// ControllerManager is the command line of a kube-controller-manager
// running only what the tests and the lab need: namespace deletion,
// default service accounts, garbage collection and EndpointSlices.
func ControllerManager(bin, kubeconfig string) []string {
	return []string{filepath.Join(bin, "kube-controller-manager"), "--kubeconfig=" + kubeconfig,
		"--controllers=endpointslice,namespace,garbagecollector,serviceaccount",
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false"}
}

// WaitReady polls url's /readyz (trusting only files' CA, with the admin
// token) until it answers 200, ctx ends, or alive reports the process
// gone. dial, when set, opens the connections (to reach a server in
// another network namespace).
func WaitReady(ctx context.Context, url string, f Files, alive func() bool, dial func(ctx context.Context, network, addr string) (net.Conn, error)) error {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(f.CACert)
	if err != nil {
		return err
	}
	pool.AppendCertsFromPEM(ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DialContext: dial}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+f.Token)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz: %s", resp.Status)
		}
		last = err
		if alive != nil && !alive() {
			return fmt.Errorf("kube-apiserver exited (last check: %v)", last)
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("kube-apiserver not ready: %w", ctx.Err()), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
