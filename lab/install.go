package lab

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// This file installs Palisade on a lab of real nodes (Options.Kubelet)
// the way docs/install.md tells a user: the etcd certificate into the
// Secret calico-etcd-secrets with kubectl, the manifest's etcd_endpoints
// and CALICO_IPV4POOL_CIDR filled in, `kubectl apply -f`, then waiting
// for the DaemonSet and the Deployment to roll out.

// InstalledManifest is the filled-in manifest the lab applied.
func (l *Lab) InstalledManifest() string { return l.path("kube", "calico-etcd.yaml") }

// fillManifest edits the manifest as docs/install.md's step 4 says (and
// the pools' encapsulation for --vxlan), failing when a line it must
// change is not there.
func (l *Lab) fillManifest(text string) (string, error) {
	o := l.st.Options
	type edit struct{ old, new string }
	edits := []edit{
		{`etcd_endpoints: "https://<ETCD_IP>:2379"`, fmt.Sprintf("etcd_endpoints: %q", strings.Join(l.etcdEndpoints(), ","))},
		{"            # - name: CALICO_IPV4POOL_CIDR\n            #   value: \"192.168.0.0/16\"",
			"            - name: CALICO_IPV4POOL_CIDR\n              value: \"" + o.PoolCIDR + "\""},
	}
	if o.Backend == BackendVXLAN {
		edits = append(edits, edit{`calico_backend: "bird"`, `calico_backend: "vxlan"`})
	}
	if o.VXLAN != "" && o.VXLAN != VXLANNever {
		edits = append(edits, edit{"            - name: CALICO_IPV4POOL_VXLAN\n              value: \"Never\"",
			"            - name: CALICO_IPV4POOL_VXLAN\n              value: \"" + o.VXLAN + "\""})
	}
	for _, e := range edits {
		if !strings.Contains(text, e.old) {
			return "", fmt.Errorf("manifest %s: no %q to fill in (has the manifest changed? docs/install.md and lab/install.go follow it)", o.Manifest, e.old)
		}
		text = strings.Replace(text, e.old, e.new, 1)
	}
	return text, nil
}

// installPalisade fills in and applies the manifest and waits until
// calico-node runs on every node and calico-kube-controllers is
// available.
func (l *Lab) installPalisade(ctx context.Context) error {
	o := l.st.Options
	began := time.Now()
	files := l.etcdClientFiles()
	l.say("kubectl create secret generic calico-etcd-secrets (the etcd CA and client certificate)")
	if _, err := l.KubectlOutput(ctx, "", "-n", "kube-system", "create", "secret", "generic", "calico-etcd-secrets",
		"--from-file=etcd-ca="+files.CA, "--from-file=etcd-cert="+files.ClientCert, "--from-file=etcd-key="+files.ClientKey); err != nil {
		return err
	}
	if !o.KubeProxy {
		// No kube-proxy: felix's eBPF dataplane load-balances Services,
		// but calico-node (and its CNI plugin's kubeconfig, and
		// calico-kube-controllers) must reach the API server before it
		// has any Service: its own address, as Calico's eBPF install
		// says (the manifest's optional envFrom).
		l.say("kubectl create configmap kubernetes-services-endpoint (the API server's own address: no kube-proxy)")
		if _, err := l.KubectlOutput(ctx, "", "-n", "kube-system", "create", "configmap", "kubernetes-services-endpoint",
			"--from-literal=KUBERNETES_SERVICE_HOST="+kubeAddr.String(), fmt.Sprintf("--from-literal=KUBERNETES_SERVICE_PORT=%d", kubeAPIPort)); err != nil {
			return err
		}
	}
	raw, err := os.ReadFile(o.Manifest)
	if err != nil {
		return fmt.Errorf("reading the manifest: %w", err)
	}
	filled, err := l.fillManifest(string(raw))
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.InstalledManifest(), []byte(filled), 0o644); err != nil {
		return err
	}
	l.say("kubectl apply -f %s (filled in from %s)", l.InstalledManifest(), o.Manifest)
	if _, err := l.KubectlOutput(ctx, "", "apply", "-f", l.InstalledManifest()); err != nil {
		return err
	}
	if err := l.WaitRollout(ctx, "ds/calico-node", 3*time.Minute); err != nil {
		return err
	}
	if err := l.WaitRollout(ctx, "deploy/calico-kube-controllers", 2*time.Minute); err != nil {
		return err
	}
	l.say("✓ Palisade installed from its manifest (%s)", time.Since(began).Round(10*time.Millisecond))
	return nil
}

// WaitRollout waits for `kubectl -n kube-system rollout status` of
// what ("ds/calico-node"); on failure the error carries the pods'
// state and the events.
func (l *Lab) WaitRollout(ctx context.Context, what string, timeout time.Duration) error {
	began := time.Now()
	out, err := l.KubectlOutput(ctx, "", "-n", "kube-system", "rollout", "status", what, "--timeout="+timeout.String())
	if err != nil {
		pods, _ := l.KubectlOutput(ctx, "", "get", "pods", "-A", "-o", "wide")
		events, _ := l.KubectlOutput(ctx, "", "get", "events", "-A", "--sort-by=.lastTimestamp")
		logs, _ := l.KubectlOutput(ctx, "", "-n", "kube-system", "logs", what, "--all-containers", "--tail=40")
		return fmt.Errorf("%s did not roll out: %w\n%s\n%s\n%s\nlogs of %s:\n%s", what, err, out, pods, lastLines(events, 30), what, logs)
	}
	l.say("✓ %s rolled out (%s)", what, time.Since(began).Round(10*time.Millisecond))
	return nil
}

// WaitNodesReady waits until every lab node's Kubernetes Node is Ready.
func (l *Lab) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	began := time.Now()
	if _, err := l.KubectlOutput(ctx, "", "wait", "--for=condition=Ready", "nodes", "--all", "--timeout="+timeout.String()); err != nil {
		nodes, _ := l.KubectlOutput(ctx, "", "get", "nodes", "-o", "wide")
		return fmt.Errorf("nodes not Ready: %w\n%s", err, nodes)
	}
	l.say("✓ every node Ready (%s)", time.Since(began).Round(10*time.Millisecond))
	return nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
