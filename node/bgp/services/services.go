// Package services feeds the node's BGP advertisement with the cluster's
// Kubernetes Services: client-go informers over Services and
// EndpointSlices (Watcher), and the pure conversion of one Service and
// its slices into what package paths needs (From).
package services

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/palisade-net/palisade/node/bgp/paths"
)

// From describes svc as seen from node: its addresses, its traffic
// policies, and whether node holds a ready endpoint of it in slices (the
// Service's EndpointSlices), and whether any node does. An endpoint whose ready condition is unset
// counts as ready, as the EndpointSlice API defines. Unparsable and
// "None" addresses are skipped.
func From(node string, svc *corev1.Service, slices []*discoveryv1.EndpointSlice) paths.Service {
	out := paths.Service{
		Name:          svc.Namespace + "/" + svc.Name,
		ExternalLocal: svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		InternalLocal: svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal,
	}
	cluster := svc.Spec.ClusterIPs
	if len(cluster) == 0 && svc.Spec.ClusterIP != "" {
		cluster = []string{svc.Spec.ClusterIP}
	}
	out.ClusterIPs = parseAll(cluster)
	out.ExternalIPs = parseAll(svc.Spec.ExternalIPs)
	var lb []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		lb = append(lb, ing.IP)
	}
	out.LoadBalancerIPs = parseAll(lb)
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			out.AnyEndpoint = true
			if ep.NodeName != nil && *ep.NodeName == node {
				out.LocalEndpoint = true
			}
		}
	}
	return out
}

func parseAll(ss []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}
