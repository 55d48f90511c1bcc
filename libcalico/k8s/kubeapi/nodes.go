package kubeapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// This file is what a control plane with real kubelets needs beyond the
// API server: client certificates (each kubelet's node identity, the API
// server's own to the kubelets), kube-scheduler, and a
// kube-controller-manager running every controller a cluster runs.

// IssueClient writes a client certificate and key signed by the CA, for
// user cn in groups orgs (system:node:<name> in system:nodes is a
// kubelet), and returns their paths (cn's file names in the directory).
func (f Files) IssueClient(cn string, orgs ...string) (cert, key string, err error) {
	cert = filepath.Join(f.Dir, cn+".crt")
	key = filepath.Join(f.Dir, cn+".key")
	ca, caKey, err := f.loadCA()
	if err != nil {
		return "", "", err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return "", "", fmt.Errorf("issuing a client certificate for %s: %w", cn, err)
	}
	if err := os.WriteFile(cert, pemBlock("CERTIFICATE", der), 0o600); err != nil {
		return "", "", err
	}
	return cert, key, os.WriteFile(key, ecPEM(k), 0o600)
}

// KubeletClient is the API server's client certificate to the kubelets
// (made by EnsureKubeletClient).
func (f Files) KubeletClient() (cert, key string) {
	return filepath.Join(f.Dir, "kube-apiserver-kubelet-client.crt"), filepath.Join(f.Dir, "kube-apiserver-kubelet-client.key")
}

// EnsureKubeletClient issues the API server's client certificate to the
// kubelets (in system:masters, so the kubelets' webhook authorization
// lets it exec, read logs and port-forward).
func (f Files) EnsureKubeletClient() error {
	_, _, err := f.IssueClient("kube-apiserver-kubelet-client", "system:masters")
	return err
}

// ClientKubeconfig renders a kubeconfig for server that presents a
// client certificate.
func (f Files) ClientKubeconfig(server, user, cert, key string) []byte {
	return f.kubeconfig(server, user, "    client-certificate: "+cert+"\n    client-key: "+key+"\n")
}

func (f Files) loadCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(f.CACert)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the Kubernetes CA: %w", err)
	}
	kb, err := os.ReadFile(f.CAKey)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the Kubernetes CA's key: %w", err)
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, nil, errors.New("the Kubernetes CA or its key is not PEM")
	}
	ca, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the Kubernetes CA: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kblock.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the Kubernetes CA's key: %w", err)
	}
	return ca, key, nil
}

// ClusterControllerManager is the command line of a
// kube-controller-manager running the controllers a cluster with real
// kubelets runs (Deployments, DaemonSets, ReplicaSets, StatefulSets,
// Jobs, the node lifecycle, garbage collection, service-account tokens
// and the kube-root-ca.crt ConfigMap every pod mounts), with no cloud
// provider and no node CIDR allocation (Calico's IPAM gives addresses).
func ClusterControllerManager(bin, kubeconfig string, f Files, serviceCIDR string) []string {
	return []string{filepath.Join(bin, "kube-controller-manager"), "--kubeconfig=" + kubeconfig,
		"--controllers=*,-node-ipam-controller",
		"--root-ca-file=" + f.CACert, "--service-account-private-key-file=" + f.SAKey,
		"--service-cluster-ip-range=" + serviceCIDR, "--allocate-node-cidrs=false",
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=true",
		// Pods of a node that stops answering move on after 40 s rather
		// than 5 minutes' NoExecute toleration (the tests kill nodes).
		"--node-monitor-grace-period=40s"}
}

// Scheduler is the command line of kube-scheduler with the admin
// kubeconfig.
func Scheduler(bin, kubeconfig string) []string {
	return []string{filepath.Join(bin, "kube-scheduler"), "--kubeconfig=" + kubeconfig,
		"--leader-elect=false", "--secure-port=0"}
}
