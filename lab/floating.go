package lab

import (
	"context"
	"fmt"
)

// FloatingPoolCIDR is the IP pool a lab with Options.FloatingIPs adds
// for floating IPs: docs/floating-ips.md wants a floating IP inside a
// pool whose disableBGPExport is false to be advertised, and its
// nodeSelector !all() keeps IPAM from giving its addresses to pods.
const FloatingPoolCIDR = "10.245.0.0/24"

// floatingPoolName is that pool's name.
const floatingPoolName = "floating-ips"

// floatingConfig is what Options.FloatingIPs applies: FelixConfiguration
// default floatingIPs: Enabled (keeping bpfEnabled when Options.BPF set
// it) and the floating pool.
func floatingConfig(bpf, kubeProxy bool) string {
	spec := "floatingIPs: Enabled"
	if bpf {
		spec += ", " + bpfSpec(kubeProxy)
	}
	return fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {%s}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: %s}
spec: {cidr: %s, nodeSelector: "!all()", natOutgoing: false, disableBGPExport: false}
`, spec, floatingPoolName, FloatingPoolCIDR)
}

// enableFloatingIPs applies floatingConfig (Options.FloatingIPs); the
// CNI configuration's feature_control.floating_ips is writeCNIConf's.
func (l *Lab) enableFloatingIPs(ctx context.Context) error {
	l.say("calicoctl apply: FelixConfiguration default floatingIPs: Enabled; IPPool %s %s (nodeSelector !all())", floatingPoolName, FloatingPoolCIDR)
	if err := l.Apply(ctx, floatingConfig(l.st.Options.BPF, l.st.Options.KubeProxy)); err != nil {
		return fmt.Errorf("lab %s: floating IPs: %w", l.st.Name, err)
	}
	return nil
}
