package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/palisade-net/palisade/manifests"
)

// ClusterDNS is the kube-dns Service's address in manifests/coredns.yaml,
// inside the lab's Service range: the nodes' kubelets give it to pods as
// their nameserver (KubeletConfiguration clusterDNS, with clusterDomain
// cluster.local).
const ClusterDNS = "10.96.0.10"

// dnsRolloutTimeout bounds the wait for CoreDNS to be ready.
const dnsRolloutTimeout = 2 * time.Minute

// installDNS applies the cluster DNS add-on (manifests/coredns.yaml,
// compiled into the lab) and waits until its Deployment has rolled out,
// that is until CoreDNS has listed the cluster's Services and answers. The
// coredns image must be among the images the nodes imported (make images
// writes images/coredns.tar).
func (l *Lab) installDNS(ctx context.Context) error {
	began := time.Now()
	l.say("kubectl apply -f manifests/coredns.yaml (the cluster DNS, kube-dns at %s)", ClusterDNS)
	if _, err := l.KubectlOutput(ctx, manifests.CoreDNS, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("applying the cluster DNS manifest: %w", err)
	}
	out, err := l.KubectlOutput(ctx, "", "-n", "kube-system", "rollout", "status", "deploy/coredns", "--timeout="+dnsRolloutTimeout.String())
	if err != nil {
		pods, _ := l.KubectlOutput(ctx, "", "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "wide")
		logs, _ := l.KubectlOutput(ctx, "", "-n", "kube-system", "logs", "deploy/coredns", "--tail=40")
		return fmt.Errorf("the cluster DNS did not roll out: %w\n%s\n%s\nlogs of deploy/coredns:\n%s", err, out, pods, logs)
	}
	l.say("✓ cluster DNS ready at %s (%s)", ClusterDNS, time.Since(began).Round(10*time.Millisecond))
	return nil
}
