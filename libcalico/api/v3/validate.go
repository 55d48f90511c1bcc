package v3

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"

	"github.com/palisade-net/palisade/libcalico/selector"
)

// Validate checks a resource the way Calico does before it is stored, and
// returns every problem found, joined; each names the kind, the resource,
// the field and the value, for example
//
//	IPPool "pool-a": spec.cidr "10.0.0.0/33": invalid CIDR
//
// Validate does not default: call Default first, as the client does.
func Validate(r Resource) error {
	info, ok := KindOf(r)
	if !ok {
		return fmt.Errorf("%T is not a resource kind of %s", r, APIVersion)
	}
	v := &validator{kind: info.Kind, name: resourceLabel(info, r.GetObjectMeta())}
	v.meta(info, r.GetObjectMeta())
	switch x := r.(type) {
	case *IPPool:
		v.ipPool(&x.Spec)
	case *IPReservation:
		v.ipReservation(&x.Spec)
	case *IPAMConfiguration:
		v.ipamConfig(x)
	case *BGPConfiguration:
		v.bgpConfig(x)
	case *BGPPeer:
		v.bgpPeer(&x.Spec)
	case *BGPFilter:
		v.bgpFilter(&x.Spec)
	case *Node:
		v.node(&x.Spec)
	case *WorkloadEndpoint:
		v.workloadEndpoint(&x.Spec)
		v.workloadEndpointName(x)
	case *HostEndpoint:
		v.hostEndpoint(&x.Spec)
	case *NetworkPolicy:
		v.policyName(x.Name, false)
		v.networkPolicy(&x.Spec)
	case *GlobalNetworkPolicy:
		v.policyName(x.Name, true)
		v.globalNetworkPolicy(&x.Spec)
	case *StagedNetworkPolicy:
		v.policyName(x.Name, false)
		v.stagedNetworkPolicy(&x.Spec)
	case *StagedGlobalNetworkPolicy:
		v.policyName(x.Name, true)
		v.stagedGlobalNetworkPolicy(&x.Spec)
	case *StagedKubernetesNetworkPolicy:
		v.stagedKubernetesNetworkPolicy(&x.Spec)
	case *Tier:
		v.tier(x)
	case *Profile:
		v.profile(&x.Spec)
	case *NetworkSet:
		v.networkSet(x.Labels, x.Spec.Nets)
	case *GlobalNetworkSet:
		v.networkSet(x.Labels, x.Spec.Nets)
	case *FelixConfiguration:
		v.felixConfig(x)
	case *ClusterInformation:
		v.singleton(x.Name)
	case *KubeControllersConfiguration:
		v.kubeControllersConfig(x)
	case *CalicoAPIConfig:
		v.apiConfig(&x.Spec)
	}
	return errors.Join(v.errs...)
}

// resourceLabel is how problems name the resource: "name", or
// "namespace/name" for namespaced kinds.
func resourceLabel(info KindInfo, m *ObjectMeta) string {
	if info.Namespaced && m.Namespace != "" {
		return m.Namespace + "/" + m.Name
	}
	return m.Name
}

// validator collects the problems of one resource.
type validator struct {
	kind, name string
	errs       []error
}

// fail records a problem with a field. value is quoted when it is a string
// and left out when nil.
func (v *validator) fail(field string, value any, format string, args ...any) {
	var where string
	switch x := value.(type) {
	case nil:
		where = field
	case string:
		where = fmt.Sprintf("%s %q", field, x)
	default:
		where = fmt.Sprintf("%s %v", field, x)
	}
	v.errs = append(v.errs, fmt.Errorf("%s %q: %s: %s", v.kind, v.name, where, fmt.Sprintf(format, args...)))
}

// failErr records a problem whose error already quotes the value.
func (v *validator) failErr(field string, err error) {
	v.errs = append(v.errs, fmt.Errorf("%s %q: %s: %w", v.kind, v.name, field, err))
}

var (
	dns1123LabelRE     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`) })
	dns1123SubdomainRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	})
	profileNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`) })
	labelNameRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`) })
)

// meta checks the name, namespace and labels.
func (v *validator) meta(info KindInfo, m *ObjectMeta) {
	if info.Stored {
		switch {
		case m.Name == "":
			v.fail("metadata.name", nil, "a name is required")
		default:
			if msg := dnsSubdomainProblem(m.Name); msg != "" {
				v.fail("metadata.name", m.Name, "invalid name: %s", msg)
			}
		}
	}
	switch {
	case !info.Namespaced && m.Namespace != "":
		v.fail("metadata.namespace", m.Namespace, "%s is cluster-scoped and takes no namespace", info.Kind)
	case info.Namespaced && m.Namespace != "" && (len(m.Namespace) > 63 || !dns1123LabelRE().MatchString(m.Namespace)):
		// Calico does not check a namespace; a Kubernetes namespace is a
		// DNS label, so nothing could select a resource in another
		// (docs/not-acted-on.md).
		v.fail("metadata.namespace", m.Namespace, "invalid namespace: want lower-case letters, digits and '-' (at most 63), as a Kubernetes namespace is; Calico stores it, but no namespace of that name can exist")
	}
	v.annotations("metadata.annotations", m.Annotations)
	for k, val := range m.Labels {
		if msg := labelKeyProblem(k); msg != "" {
			v.fail("metadata.labels", k, "invalid label key: %s", msg)
		}
		if val != "" && (len(val) > 63 || !labelNameRE().MatchString(val)) {
			v.fail("metadata.labels."+k, val, "invalid label value: want at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit")
		}
	}
}

// dnsSubdomainProblem explains why s is not a DNS-1123 subdomain, or
// returns "".
func dnsSubdomainProblem(s string) string {
	if len(s) > 253 {
		return "longer than 253 characters"
	}
	if !dns1123SubdomainRE().MatchString(s) {
		return "want lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
	}
	return ""
}

// labelKeyProblem explains why k is not a Kubernetes label key, or
// returns "".
func labelKeyProblem(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	} else if msg := dnsSubdomainProblem(prefix); msg != "" || prefix == "" {
		return "the prefix must be a DNS subdomain"
	}
	if len(name) == 0 || len(name) > 63 || !labelNameRE().MatchString(name) {
		return "want at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
	}
	return ""
}

// singleton checks the name of kinds of which only "default" exists.
func (v *validator) singleton(name string) {
	if name != "default" && name != "" {
		v.fail("metadata.name", name, "the only allowed name is \"default\"")
	}
}

// defaultOrNode checks the name of per-cluster or per-node configuration
// kinds and reports whether it is the cluster-wide "default".
func (v *validator) defaultOrNode(name string) bool {
	if name == "default" {
		return true
	}
	if n, ok := strings.CutPrefix(name, "node."); !ok || n == "" {
		v.fail("metadata.name", name, "want \"default\" or \"node.<nodename>\"")
	}
	return false
}

// selector checks a selector expression (empty is all()).
func (v *validator) selector(field, s string) {
	if s == "" {
		return
	}
	if _, err := selector.Parse(s); err != nil {
		v.failErr(field, err)
	}
}

// cidr parses a CIDR that must be a network address (no host bits);
// version is 0 (any), 4 or 6. It returns false after recording a problem.
func (v *validator) cidr(field, s string, version int) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		v.fail(field, s, "invalid CIDR")
		return netip.Prefix{}, false
	}
	if !v.version(field, s, p.Addr(), version) {
		return netip.Prefix{}, false
	}
	if m := p.Masked(); m != p {
		v.fail(field, s, "host bits are set: the network is %s", m)
		return netip.Prefix{}, false
	}
	return p, true
}

// version checks the IP version of an address; 0 accepts any.
func (v *validator) version(field, s string, a netip.Addr, version int) bool {
	switch {
	case version == 4 && !a.Is4():
		v.fail(field, s, "want an IPv4 address")
		return false
	case version == 6 && !a.Is6():
		v.fail(field, s, "want an IPv6 address")
		return false
	}
	return true
}

// ip parses an IP address of the given version (0 for any).
func (v *validator) ip(field, s string, version int) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		v.fail(field, s, "invalid IP address")
		return netip.Addr{}, false
	}
	return a, v.version(field, s, a, version)
}

// ipOrCIDR parses an address with or without a prefix length (host bits
// allowed), of the given version.
func (v *validator) ipOrCIDR(field, s string, version int) (netip.Prefix, bool) {
	if !strings.Contains(s, "/") {
		a, ok := v.ip(field, s, version)
		if !ok {
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		v.fail(field, s, "invalid CIDR")
		return netip.Prefix{}, false
	}
	return p, v.version(field, s, p.Addr(), version)
}

// nets checks a list of networks (CIDRs or single addresses) of the given
// version (0 for any).
func (v *validator) nets(field string, nets []string, version int) {
	for i, n := range nets {
		f := fmt.Sprintf("%s[%d]", field, i)
		if !strings.Contains(n, "/") {
			v.ip(f, n, version)
			continue
		}
		v.cidr(f, n, version)
	}
}

// oneOf checks an enumerated value; empty is accepted (unset).
func (v *validator) oneOf(field, value string, allowed ...string) {
	if value == "" {
		return
	}
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	v.fail(field, value, "want one of %s", strings.Join(allowed, ", "))
}

// interfaceName checks a Linux interface name: 1-15 bytes, no '/', ':' or
// whitespace, not "." or "..".
func (v *validator) interfaceName(field, s string) {
	if msg := interfaceNameProblem(s); msg != "" {
		v.fail(field, s, "invalid interface name: %s", msg)
	}
}

func interfaceNameProblem(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > 15:
		return "longer than 15 characters"
	case s == "." || s == "..":
		return "not allowed"
	case strings.ContainsAny(s, "/: \t\n\r\v\f"):
		return "contains '/', ':' or whitespace"
	}
	return ""
}

// mac checks a MAC address.
func (v *validator) mac(field, s string) {
	if s == "" {
		return
	}
	if hw, err := net.ParseMAC(s); err != nil || len(hw) != 6 {
		v.fail(field, s, "invalid MAC address")
	}
}

// names checks a list of resource names (profiles, filters ...).
func (v *validator) names(field string, names []string, re *regexp.Regexp) {
	for i, n := range names {
		if n == "" || len(n) > 253 || !re.MatchString(n) {
			v.fail(fmt.Sprintf("%s[%d]", field, i), n, "invalid name")
		}
	}
}
