package bgp

import (
	"encoding/json"
	"sort"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// IgnoredConfig lists the fields of a BGPConfiguration that are set but
// not acted on, each with what happens instead, so that the node can say
// so (once) in its log: those of v3.NotActedOn, and values of fields
// otherwise acted on.
func IgnoredConfig(c v3.BGPConfigurationSpec) []string {
	var out []string
	for _, f := range v3.NotActedOnFields(&v3.BGPConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPConfiguration, APIVersion: v3.APIVersion}, Spec: c}) {
		if strings.HasPrefix(f, "spec.") {
			out = append(out, f+" is not acted on")
		}
	}
	if c.LogSeverityScreen != "" && c.LogSeverityScreen != "Info" {
		out = append(out, "spec.logSeverityScreen "+c.LogSeverityScreen+" is not acted on: GoBGP's messages follow calico-node's log level (CALICO_LOG_LEVEL)")
	}
	if c.ProgramClusterRoutes != nil && *c.ProgramClusterRoutes == "Disabled" {
		out = append(out, "spec.programClusterRoutes Disabled is not acted on: the BGP part still programs the routes it learns")
	}
	return out
}

// IgnoredNodeConfig lists the fields of a node's own BGPConfiguration
// (node.<name>) that are set but not acted on: only listenPort is read
// from it; everything else comes from the default one.
func IgnoredNodeConfig(c v3.BGPConfigurationSpec) []string {
	b, _ := json.Marshal(c)
	var fields map[string]any
	_ = json.Unmarshal(b, &fields)
	delete(fields, "listenPort")
	var out []string
	for k := range fields {
		out = append(out, "spec."+k+" is not acted on in a node's BGPConfiguration: only listenPort is; the rest comes from the default one")
	}
	sort.Strings(out)
	return out
}
