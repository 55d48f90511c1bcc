package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/palisade-net/palisade/manifests"
)

// installAdminPolicyCRDs applies manifests/network-policy-api-crds.yaml
// (AdminNetworkPolicy, BaselineAdminNetworkPolicy) and waits until the
// API server serves them, so calico-kube-controllers enforces them from
// its start.
func (l *Lab) installAdminPolicyCRDs(ctx context.Context) error {
	began := time.Now()
	if _, err := l.KubectlOutput(ctx, manifests.AdminNetworkPolicyCRDs, "apply", "--server-side", "--field-manager=palisade-lab", "-f", "-"); err != nil {
		return fmt.Errorf("installing the network-policy-api CRDs: %w", err)
	}
	if _, err := l.KubectlOutput(ctx, "", "wait", "--for=condition=Established", "--timeout=30s",
		"crd/adminnetworkpolicies.policy.networking.k8s.io", "crd/baselineadminnetworkpolicies.policy.networking.k8s.io"); err != nil {
		return fmt.Errorf("waiting for the network-policy-api CRDs: %w", err)
	}
	l.say("✓ AdminNetworkPolicy and BaselineAdminNetworkPolicy CRDs installed (%s)", time.Since(began).Round(10*time.Millisecond))
	return nil
}
