package dataplane

import (
	"regexp"
	"strings"
)

// ifaceExclusion is FelixConfiguration's interfaceExclude parsed: names
// matched exactly, and entries written between slashes (/^kube-.*/) as
// regular expressions. An excluded interface is never a host endpoint.
type ifaceExclusion struct {
	names   map[string]bool
	regexps []*regexp.Regexp
	// invalid lists the entries that are not valid regular expressions
	// (validation rejects them; they are skipped here).
	invalid []string
}

func parseIfaceExclusion(entries []string) ifaceExclusion {
	x := ifaceExclusion{names: map[string]bool{}}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if len(e) >= 2 && strings.HasPrefix(e, "/") && strings.HasSuffix(e, "/") {
			re, err := regexp.Compile(e[1 : len(e)-1])
			if err != nil {
				x.invalid = append(x.invalid, e)
				continue
			}
			x.regexps = append(x.regexps, re)
			continue
		}
		if e != "" {
			x.names[e] = true
		}
	}
	return x
}

// excludes reports whether the interface named iface is excluded.
func (x ifaceExclusion) excludes(iface string) bool {
	if x.names[iface] {
		return true
	}
	for _, re := range x.regexps {
		if re.MatchString(iface) {
			return true
		}
	}
	return false
}
