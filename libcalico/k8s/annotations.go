package k8s

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Annotations Calico reads on pods (and, for the pools, namespaces) and
// writes on pods.
const (
	AnnotationIPAddrs       = "cni.projectcalico.org/ipAddrs"
	AnnotationIPAddrsNoIPAM = "cni.projectcalico.org/ipAddrsNoIpam"
	AnnotationIPv4Pools     = "cni.projectcalico.org/ipv4pools"
	AnnotationIPv6Pools     = "cni.projectcalico.org/ipv6pools"
	AnnotationFloatingIPs   = "cni.projectcalico.org/floatingIPs"
	// AnnotationPodIP, AnnotationPodIPs and AnnotationContainerID are
	// written by the CNI plugin: the pod's addresses as CIDRs and the
	// sandbox they belong to.
	AnnotationPodIP       = "cni.projectcalico.org/podIP"
	AnnotationPodIPs      = "cni.projectcalico.org/podIPs"
	AnnotationContainerID = "cni.projectcalico.org/containerID"
)

// Addressing is how a pod asks for its addresses through annotations.
type Addressing struct {
	// Requested are the addresses of ipAddrs (from IPAM) or
	// ipAddrsNoIpam (bypassing IPAM, NoIPAM set).
	Requested []netip.Addr
	NoIPAM    bool
	// IPv4Pools and IPv6Pools, when set, restrict IPAM to these pools
	// (names or CIDRs), from the pod's annotation or else its
	// namespace's.
	IPv4Pools, IPv6Pools []string
	// Floating are the addresses of the floatingIPs annotation, in its
	// order: each becomes an ipNAT of the pod's address of its family.
	Floating []netip.Addr
}

// PodAddressing reads the pod's (and its namespace's) addressing
// annotations as Calico does: ipAddrs and ipAddrsNoIpam are JSON lists
// of at most one IPv4 and one IPv6 address and exclude each other;
// ipv4pools and ipv6pools are JSON lists of pool names or CIDRs, the
// pod's winning over the namespace's; floatingIPs is a JSON list of
// addresses of either family. ns may be nil.
func PodAddressing(pod *corev1.Pod, ns *corev1.Namespace) (Addressing, error) {
	var a Addressing
	annot := pod.Annotations
	if v, ok := annot[AnnotationFloatingIPs]; ok {
		var err error
		if a.Floating, err = parseFloating(v); err != nil {
			return a, err
		}
	}
	ips, hasIPs := annot[AnnotationIPAddrs]
	noIPAM, hasNoIPAM := annot[AnnotationIPAddrsNoIPAM]
	if hasIPs && hasNoIPAM {
		return a, fmt.Errorf("can't have both annotations: 'ipAddrs' and 'ipAddrsNoIpam' in use at the same time")
	}
	var err error
	switch {
	case hasIPs:
		a.Requested, err = parseAddrs(AnnotationIPAddrs, ips)
	case hasNoIPAM:
		a.Requested, err = parseAddrs(AnnotationIPAddrsNoIPAM, noIPAM)
		a.NoIPAM = true
	}
	if err != nil {
		return a, err
	}
	pools := func(key string) ([]string, error) {
		v, ok := annot[key]
		if !ok && ns != nil {
			v, ok = ns.Annotations[key]
		}
		if !ok {
			return nil, nil
		}
		var list []string
		if err := json.Unmarshal([]byte(v), &list); err != nil {
			return nil, fmt.Errorf("annotation %s %q: want a JSON list of pool names or CIDRs: %w", key, v, err)
		}
		if len(list) == 0 {
			return nil, fmt.Errorf("annotation %s %q: names no pool", key, v)
		}
		return list, nil
	}
	if a.IPv4Pools, err = pools(AnnotationIPv4Pools); err != nil {
		return a, err
	}
	if a.IPv6Pools, err = pools(AnnotationIPv6Pools); err != nil {
		return a, err
	}
	return a, nil
}

// addrList reads a non-empty JSON list of addresses (annotation key).
func addrList(key, v string) ([]netip.Addr, error) {
	var list []string
	if err := json.Unmarshal([]byte(v), &list); err != nil {
		return nil, fmt.Errorf("annotation %s %q: want a JSON list of addresses, like [\"10.0.0.1\"]: %w", key, v, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("annotation %s %q: names no address", key, v)
	}
	out := make([]netip.Addr, 0, len(list))
	for _, s := range list {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("annotation %s: %q is not an IP address", key, s)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// parseAddrs reads a JSON list of at most one IPv4 and one IPv6 address.
func parseAddrs(key, v string) ([]netip.Addr, error) {
	out, err := addrList(key, v)
	if err != nil {
		return nil, err
	}
	v4 := 0
	for _, a := range out {
		if a.Is4() {
			v4++
		}
	}
	if v4 > 1 || len(out)-v4 > 1 {
		return nil, errors.New("annotation " + key + ": at most one IPv4 and one IPv6 address")
	}
	return out, nil
}

// parseFloating reads the floatingIPs annotation: a JSON list of
// addresses, each once.
func parseFloating(v string) ([]netip.Addr, error) {
	out, err := addrList(AnnotationFloatingIPs, v)
	if err != nil {
		return nil, err
	}
	for i, a := range out {
		if slices.Contains(out[:i], a) {
			return nil, fmt.Errorf("annotation %s: %s is named twice", AnnotationFloatingIPs, a)
		}
	}
	return out, nil
}

// IPNATs pairs each floating address with the pod's first address of
// its family (addrs, as assigned), as Calico's plugin writes the
// WorkloadEndpoint's ipNATs. A floating address of a family the pod has
// no address of is an error.
func IPNATs(floating, addrs []netip.Addr) ([][2]netip.Addr, error) {
	var out [][2]netip.Addr
	for _, f := range floating {
		i := slices.IndexFunc(addrs, func(a netip.Addr) bool { return a.Is4() == f.Is4() })
		if i < 0 {
			fam := "IPv4"
			if f.Is6() {
				fam = "IPv6"
			}
			return nil, fmt.Errorf("annotation %s: floating IP %s needs an %s address on the pod, and the pod has none", AnnotationFloatingIPs, f, fam)
		}
		out = append(out, [2]netip.Addr{addrs[i], f})
	}
	return out, nil
}

// PodIPAnnotations are the annotations the CNI plugin writes on a pod
// once it has its addresses: podIP (the first, as a CIDR), podIPs (all,
// comma-separated) and containerID.
func PodIPAnnotations(containerID string, addrs []netip.Addr) map[string]string {
	var cidrs []string
	for _, a := range addrs {
		cidrs = append(cidrs, netip.PrefixFrom(a, a.BitLen()).String())
	}
	m := map[string]string{AnnotationContainerID: containerID, AnnotationPodIPs: strings.Join(cidrs, ",")}
	if len(cidrs) > 0 {
		m[AnnotationPodIP] = cidrs[0]
	}
	return m
}
