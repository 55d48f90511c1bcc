package cniplugin

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/k8s"
)

// TestFloatingIPs runs the calico plugin in Kubernetes mode against a
// real API server: with feature_control.floating_ips the pod's
// cni.projectcalico.org/floatingIPs annotation lands in its
// WorkloadEndpoint's ipNATs (each floating address paired with the pod's
// address of its family, IPv4 and IPv6); without the feature, with an
// address that is not one, or with a floating address of a family the pod
// has no address of, ADD fails clearly and leaves nothing behind.
func TestFloatingIPs(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-f4", "10.86.0.0/16", 26)
	c.addPool("pool-f6", "fd00:86::/64", 122)
	n := c.newKubeNode(t, "node1")
	ns := fmt.Sprintf("floating-%d", time.Now().UnixNano()%1000000)
	kubeNamespace(t, n.kc, ns, nil, nil)
	feature := map[string]any{"floating_ips": true}
	dual := map[string]any{"type": "calico-ipam", "assign_ipv4": "true", "assign_ipv6": "true"}
	v4only := map[string]any{"type": "calico-ipam"}

	t.Run("IPv4 and IPv6", func(t *testing.T) {
		p := n.newPod(ns, "dual")
		kubePod(t, n.kc, p, "node1", "", nil, map[string]string{k8s.AnnotationFloatingIPs: `["203.0.113.7", "2001:db8:f::7"]`})
		list := n.kubeConf(t, dual, map[string]any{"feature_control": feature})
		r, err := n.add(list, p.runtimeConf(true))
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		_, addrs := resultAddrs(t, r)
		var v4, v6 netip.Addr
		for _, a := range addrs {
			if a.Addr().Is4() {
				v4 = a.Addr()
			} else {
				v6 = a.Addr()
			}
		}
		ep := c.endpoint(t, ns, wepName(n.node, p, true))
		if ep == nil {
			t.Fatal("no endpoint")
		}
		want := []v3.IPNAT{{InternalIP: v4.String(), ExternalIP: "203.0.113.7"}, {InternalIP: v6.String(), ExternalIP: "2001:db8:f::7"}}
		if !slices.Equal(ep.Spec.IPNATs, want) {
			t.Errorf("ipNATs %+v, want %+v", ep.Spec.IPNATs, want)
		}
		if err := n.check(list, p.runtimeConf(true)); err != nil {
			t.Errorf("CHECK: %v", err)
		}
		if err := n.del(list, p.runtimeConf(true)); err != nil {
			t.Fatal(err)
		}
		if ep := c.endpoint(t, ns, wepName(n.node, p, true)); ep != nil {
			t.Errorf("endpoint left after DEL: %+v", ep.Spec)
		}
	})

	for _, tc := range []struct {
		name, annot string
		ipam        map[string]any
		feature     bool
		err         string
	}{
		{"feature off", `["203.0.113.8"]`, v4only, false, "requested feature is not enabled: floating_ips"},
		{"not an address", `["203.0.113.0/24"]`, v4only, true, `floatingIPs: "203.0.113.0/24" is not an IP address`},
		{"not JSON", `203.0.113.8`, v4only, true, "want a JSON list of addresses"},
		{"no pod address of the family", `["203.0.113.8", "2001:db8:f::8"]`, v4only, true, "floating IP 2001:db8:f::8 needs an IPv6 address on the pod, and the pod has none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := n.newPod(ns, strings.ToLower(strings.ReplaceAll(tc.name, " ", "-")))
			kubePod(t, n.kc, p, "node1", "", nil, map[string]string{k8s.AnnotationFloatingIPs: tc.annot})
			extra := map[string]any{}
			if tc.feature {
				extra["feature_control"] = feature
			}
			_, err := n.add(n.kubeConf(t, tc.ipam, extra), p.runtimeConf(true))
			if err == nil || !strings.Contains(err.Error(), tc.err) || cniCode(err) != types.ErrInvalidEnvironmentVariables {
				t.Fatalf("ADD: %v (code %d), want it to say %q", err, cniCode(err), tc.err)
			}
			n.nothingLeft(t, p)
		})
	}
}
