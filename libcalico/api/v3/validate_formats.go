package v3

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"sync"
)

// This file holds the single-field formats Calico checks (its validator's
// tags and its CRDs' patterns and enums), with Calico's wording.

// felixLogLevels are the log levels Felix's log severity fields accept.
const felixLogLevels = "Trace|Debug|Info|Warning|Error|Fatal"

var (
	interfaceRE      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,15}$`) })
	ifaceFilterRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9:._+-]{1,15}$`) })
	ignoredIfaceRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_.*-]{1,15}$`) })
	prometheusHostRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9:._+-]{1,64}$`) })
	containerIDRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`) })
	htoNameRE        = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_ -]+$`) })
	keyValueRE       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*(\w+)=(.*)$`) })
	patternCache     sync.Map // pattern alternatives -> *regexp.Regexp
)

// pattern checks a string against a case-insensitive CRD pattern
// `^(?i)(A|B)?$`, as Calico's FelixConfiguration patterns are written.
func (v *validator) pattern(field, value, alternatives string) {
	if value == "" {
		return
	}
	src := "^(?i)(" + alternatives + ")?$"
	re, ok := patternCache.Load(src)
	if !ok {
		re, _ = patternCache.LoadOrStore(src, regexp.MustCompile(src))
	}
	if !re.(*regexp.Regexp).MatchString(value) {
		v.fail(field, value, "should match '%s'", src)
	}
}

// enum checks a value of a CRD enum (case-sensitive); empty is unset.
func (v *validator) enum(field, value string, allowed ...string) {
	if value == "" {
		return
	}
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	v.fail(field, value, "Unsupported value: supported values: %s", strings.Join(quoted, ", "))
}

// intRange checks an optional integer's bounds.
func (v *validator) intRange(field string, n *int, lo, hi int64) {
	if n == nil {
		return
	}
	switch {
	case int64(*n) < lo:
		v.fail(field, *n, "should be greater than or equal to %d", lo)
	case int64(*n) > hi:
		v.fail(field, *n, "should be less than or equal to %d", hi)
	}
}

// tag records a failed format check the way Calico's validator reports
// one without its own reason.
func (v *validator) tag(field, value, tag string) {
	name := field
	if i := strings.LastIndex(field, "."); i >= 0 {
		name = field[i+1:]
	}
	if j := strings.Index(name, "["); j >= 0 {
		name = name[:j]
	}
	v.fail(field, value, "failed to validate Field: %s because of Tag: %s", upperFirst(name), tag)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// validKeyValueList accepts a comma-separated list of key=value items.
func validKeyValueList(s string) bool {
	if strings.TrimSpace(s) == "" {
		return true
	}
	for _, item := range strings.Split(s, ",") {
		if item != "" && !keyValueRE().MatchString(item) {
			return false
		}
	}
	return true
}

// parseCIDROrIP parses a CIDR (host bits allowed) or an address, which is
// taken as a full-length prefix.
func parseCIDROrIP(s string) (netip.Prefix, bool) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	p, err := netip.ParsePrefix(s)
	return p, err == nil
}

// nameLabelFmt is the DNS-1123 label syntax, as Calico quotes it in its
// name errors.
const nameLabelFmt = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"

var (
	// networkPolicyNameRE is Calico's: a label, a label with one dot, or a
	// subdomain after "knp.default." or "ossg.default.".
	networkPolicyNameRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^((` + nameLabelFmt + `)(\.` + nameLabelFmt + `)?|((?:knp|ossg)\.default\.(` + nameLabelFmt + `(\.` + nameLabelFmt + `)*)))$`)
	})
	// globalNetworkPolicyNameRE is a label, optionally after one label and
	// a dot, or the subdomain name of an AdminNetworkPolicy or the
	// BaselineAdminNetworkPolicy after the prefix Calico gives its policy.
	globalNetworkPolicyNameRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^((` + nameLabelFmt + `\.)?` + nameLabelFmt +
			`|(?:kanp\.adminnetworkpolicy|kbanp\.baselineadminnetworkpolicy)\.` + nameLabelFmt + `(\.` + nameLabelFmt + `)*)$`)
	})
)

// totalAnnotationSizeLimit is Kubernetes' (and Calico's) bound on the
// annotations of one object.
const totalAnnotationSizeLimit = 256 * 1024

// annotations checks annotation keys and their total size, as Calico does.
func (v *validator) annotations(field string, a map[string]string) {
	total := 0
	for k, val := range a {
		if msg := labelKeyProblem(strings.ToLower(k)); msg != "" {
			v.fail(field, k, "invalid annotation key: %s", msg)
		}
		total += len(k) + len(val)
	}
	if total > totalAnnotationSizeLimit {
		v.fail(field, nil, "total size of annotations is too large by %d bytes", total-totalAnnotationSizeLimit)
	}
}

// policyName checks the name of a policy kind against Calico's syntax.
func (v *validator) policyName(name string, global bool) {
	if len(name) > 253 {
		v.fail("metadata.name", name, "name is too long by %d bytes", len(name)-253)
	}
	re := networkPolicyNameRE()
	if global {
		re = globalNetworkPolicyNameRE()
	}
	if !re.MatchString(name) {
		v.fail("metadata.name", name, "name must consist of lower case alphanumeric characters or '-' (regex: %s)", nameLabelFmt)
	}
}
