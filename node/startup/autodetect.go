package startup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
)

// Autodetection method kinds, as IP_AUTODETECTION_METHOD spells them.
const (
	MethodFirstFound    = "first-found"
	MethodCanReach      = "can-reach"
	MethodInterface     = "interface"
	MethodSkipInterface = "skip-interface"
	MethodCIDR          = "cidr"
)

// ErrNoAddress means autodetection found no suitable address.
var ErrNoAddress = errors.New("no suitable address found")

// defaultExcludes are the interfaces first-found, skip-interface and cidr
// never pick: loopback, container bridges, veths and Calico's own devices,
// as Calico excludes them.
var defaultExcludes = regexp.MustCompile(`^(docker.*|cbr.*|dummy.*|virbr.*|lxcbr.*|veth.*|lo|cali.*|tunl.*|flannel.*|kube-ipvs.*|cni.*|vxlan\.calico.*|vxlan-v6\.calico.*|wireguard\.cali.*|wg-v6\.cali.*|nodelocaldns.*)$`)

// Method is a parsed autodetection method.
type Method struct {
	// Kind is one of the Method* constants.
	Kind string
	// Target is the can-reach destination (an address or host name).
	Target string
	// Regexps are the interface= or skip-interface= expressions.
	Regexps []*regexp.Regexp
	// CIDRs are the cidr= ranges.
	CIDRs []netip.Prefix
}

// String renders the method as it was written.
func (m Method) String() string {
	switch m.Kind {
	case MethodCanReach:
		return m.Kind + "=" + m.Target
	case MethodInterface, MethodSkipInterface:
		s := make([]string, len(m.Regexps))
		for i, r := range m.Regexps {
			s[i] = r.String()
		}
		return m.Kind + "=" + strings.Join(s, ",")
	case MethodCIDR:
		s := make([]string, len(m.CIDRs))
		for i, c := range m.CIDRs {
			s[i] = c.String()
		}
		return m.Kind + "=" + strings.Join(s, ",")
	}
	return m.Kind
}

// ParseMethod reads an autodetection method; empty means first-found.
func ParseMethod(s string) (Method, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == MethodFirstFound {
		return Method{Kind: MethodFirstFound}, nil
	}
	kind, arg, ok := strings.Cut(s, "=")
	if !ok || arg == "" {
		return Method{}, fmt.Errorf("autodetection method %q: want first-found, can-reach=<address>, interface=<regex>, skip-interface=<regex> or cidr=<cidr,...>", s)
	}
	m := Method{Kind: kind}
	switch kind {
	case MethodCanReach:
		m.Target = arg
	case MethodInterface, MethodSkipInterface:
		for _, e := range strings.Split(arg, ",") {
			re, err := regexp.Compile(e)
			if err != nil {
				return Method{}, fmt.Errorf("autodetection method %q: regex %q: %w", s, e, err)
			}
			m.Regexps = append(m.Regexps, re)
		}
	case MethodCIDR:
		for _, c := range strings.Split(arg, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(c))
			if err != nil {
				return Method{}, fmt.Errorf("autodetection method %q: cidr %q: %w", s, c, err)
			}
			m.CIDRs = append(m.CIDRs, p.Masked())
		}
	default:
		return Method{}, fmt.Errorf("autodetection method %q: unknown method %q (want first-found, can-reach, interface, skip-interface or cidr)", s, kind)
	}
	return m, nil
}

// Detect finds this host's address of one family (v6 false: IPv4) by
// method, with the prefix length of the interface that carries it.
func Detect(ctx context.Context, h Host, m Method, v6 bool) (netip.Prefix, string, error) {
	ifs, err := h.Interfaces()
	if err != nil {
		return netip.Prefix{}, "", err
	}
	fam := "IPv4"
	if v6 {
		fam = "IPv6"
	}
	switch m.Kind {
	case MethodFirstFound, "":
		return firstUsable(ifs, v6, func(Interface) bool { return true }, nil,
			fmt.Errorf("first-found: %w: no up interface (other than loopback, bridges, veths and Calico's own) has a global %s address", ErrNoAddress, fam))
	case MethodInterface:
		matched := false
		p, name, err := firstUsableNoExclude(ifs, v6, func(i Interface) bool {
			if matchAny(m.Regexps, i.Name) {
				matched = true
				return true
			}
			return false
		})
		if err == nil {
			return p, name, nil
		}
		if !matched {
			return netip.Prefix{}, "", fmt.Errorf("%s: %w: no interface matches (interfaces: %s)", m, ErrNoAddress, names(ifs))
		}
		return netip.Prefix{}, "", fmt.Errorf("%s: %w: the matching interfaces are down or have no global %s address", m, ErrNoAddress, fam)
	case MethodSkipInterface:
		return firstUsable(ifs, v6, func(i Interface) bool { return !matchAny(m.Regexps, i.Name) }, nil,
			fmt.Errorf("%s: %w: every other interface is down, excluded or without a global %s address", m, ErrNoAddress, fam))
	case MethodCIDR:
		return firstUsable(ifs, v6, func(Interface) bool { return true }, func(p netip.Prefix) bool {
			for _, c := range m.CIDRs {
				if c.Contains(p.Addr()) {
					return true
				}
			}
			return false
		}, fmt.Errorf("%s: %w: no up interface has a %s address in those ranges", m, ErrNoAddress, fam))
	case MethodCanReach:
		return canReach(ctx, h, ifs, m, v6)
	}
	return netip.Prefix{}, "", fmt.Errorf("autodetection method %q: unknown", m.Kind)
}

func canReach(ctx context.Context, h Host, ifs []Interface, m Method, v6 bool) (netip.Prefix, string, error) {
	dst, err := netip.ParseAddr(m.Target)
	if err != nil {
		network := "ip4"
		if v6 {
			network = "ip6"
		}
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, network, m.Target)
		if lerr != nil || len(ips) == 0 {
			return netip.Prefix{}, "", fmt.Errorf("%s: resolving %q: %w", m, m.Target, lerr)
		}
		dst = ips[0]
	}
	dst = dst.Unmap()
	if dst.Is6() != v6 {
		return netip.Prefix{}, "", fmt.Errorf("%s: %s is not an address of the family being detected", m, dst)
	}
	src, err := h.SourceFor(dst)
	if err != nil {
		return netip.Prefix{}, "", fmt.Errorf("%s: %w", m, err)
	}
	if p, name, ok := findAddress(ifs, src); ok {
		return p, name, nil
	}
	return netip.Prefix{}, "", fmt.Errorf("%s: source address %s is on no interface", m, src)
}

// firstUsable returns the first global address of the family on an up
// interface that is not excluded by default, passes keepIf, and whose
// address passes keepAddr (nil keeps every address).
func firstUsable(ifs []Interface, v6 bool, keepIf func(Interface) bool, keepAddr func(netip.Prefix) bool, notFound error) (netip.Prefix, string, error) {
	for _, i := range ifs {
		if defaultExcludes.MatchString(i.Name) || !keepIf(i) || !i.Up {
			continue
		}
		for _, a := range i.Addrs {
			if usable(a, v6) && (keepAddr == nil || keepAddr(a)) {
				return a, i.Name, nil
			}
		}
	}
	return netip.Prefix{}, "", notFound
}

// firstUsableNoExclude is firstUsable for interface=, where the user's
// regex alone decides.
func firstUsableNoExclude(ifs []Interface, v6 bool, keepIf func(Interface) bool) (netip.Prefix, string, error) {
	for _, i := range ifs {
		if !keepIf(i) || !i.Up {
			continue
		}
		for _, a := range i.Addrs {
			if usable(a, v6) {
				return a, i.Name, nil
			}
		}
	}
	return netip.Prefix{}, "", ErrNoAddress
}

// usable: an address of the family that can identify the node (not
// loopback, link-local or multicast).
func usable(p netip.Prefix, v6 bool) bool {
	a := p.Addr()
	return a.Is6() == v6 && !a.Is4In6() && a.IsGlobalUnicast() && !a.IsLinkLocalUnicast()
}

// findAddress returns the interface address equal to a, with its prefix.
func findAddress(ifs []Interface, a netip.Addr) (netip.Prefix, string, bool) {
	for _, i := range ifs {
		for _, p := range i.Addrs {
			if p.Addr() == a {
				return p, i.Name, true
			}
		}
	}
	return netip.Prefix{}, "", false
}

func matchAny(res []*regexp.Regexp, name string) bool {
	for _, re := range res {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

func names(ifs []Interface) string {
	s := make([]string, len(ifs))
	for i, f := range ifs {
		s[i] = f.Name
	}
	return strings.Join(s, ", ")
}
