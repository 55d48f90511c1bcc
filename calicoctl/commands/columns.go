package commands

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// column renders one table cell from a resource's JSON form.
type column func(obj map[string]any, lk *lookups) string

// table describes the ps and wide tables of one kind.
type table struct {
	ps, wide []string
	cols     map[string]column
}

// tableFor returns the table description of kind. Kinds without their own
// table print NAME (and LABELS when wide).
func tableFor(kind string) table {
	common := map[string]column{
		"NAME":      str("metadata", "name"),
		"NAMESPACE": str("metadata", "namespace"),
		"LABELS":    joined("metadata", "labels"),
	}
	t := table{ps: []string{"NAME"}, wide: []string{"NAME", "LABELS"}, cols: map[string]column{}}
	switch kind {
	case v3.KindIPPool:
		t.ps = []string{"NAME", "CIDR", "SELECTOR"}
		t.wide = []string{"NAME", "CIDR", "NAT", "IPIPMODE", "VXLANMODE", "DISABLED", "DISABLEBGPEXPORT", "SELECTOR"}
		t.cols = map[string]column{
			"CIDR":             str("spec", "cidr"),
			"NAT":              boolean("spec", "natOutgoing"),
			"IPIPMODE":         orDefault(str("spec", "ipipMode"), "Never"),
			"VXLANMODE":        orDefault(str("spec", "vxlanMode"), "Never"),
			"DISABLED":         boolean("spec", "disabled"),
			"DISABLEBGPEXPORT": boolean("spec", "disableBGPExport"),
			"SELECTOR":         str("spec", "nodeSelector"),
		}
	case "Node":
		t.wide = []string{"NAME", "ASN", "IPV4", "IPV6"}
		t.cols = map[string]column{
			"ASN": func(o map[string]any, lk *lookups) string {
				if get(o, "spec", "bgp") == nil {
					return ""
				}
				if as := str("spec", "bgp", "asNumber")(o, lk); as != "" {
					return as
				}
				return "(" + lk.clusterASNumber() + ")"
			},
			"IPV4": str("spec", "bgp", "ipv4Address"),
			"IPV6": str("spec", "bgp", "ipv6Address"),
		}
	case "BGPPeer":
		t.ps = []string{"NAME", "PEERIP", "NODE", "ASN"}
		t.wide = t.ps
		t.cols = map[string]column{
			"PEERIP": str("spec", "peerIP"),
			"NODE": func(o map[string]any, lk *lookups) string {
				if n := str("spec", "node")(o, lk); n != "" {
					return n
				}
				if s := str("spec", "nodeSelector")(o, lk); s != "" {
					return s
				}
				return "(global)"
			},
			"ASN": orDefault(str("spec", "asNumber"), "0"),
		}
	case "BGPConfiguration":
		t.ps = []string{"NAME", "LOGSEVERITY", "MESHENABLED", "ASNUMBER"}
		t.wide = t.ps
		t.cols = map[string]column{
			"LOGSEVERITY": str("spec", "logSeverityScreen"),
			"MESHENABLED": orDefault(str("spec", "nodeToNodeMeshEnabled"), "-"),
			"ASNUMBER":    orDefault(str("spec", "asNumber"), "-"),
		}
	case "WorkloadEndpoint":
		t.ps = []string{"WORKLOAD", "NODE", "NETWORKS", "INTERFACE"}
		t.wide = []string{"NAME", "WORKLOAD", "NODE", "NETWORKS", "INTERFACE", "PROFILES", "NATS"}
		t.cols = map[string]column{
			"NODE":         str("spec", "node"),
			"ORCHESTRATOR": str("spec", "orchestrator"),
			"WORKLOAD":     orElse(str("spec", "workload"), str("spec", "pod")),
			"NETWORKS":     joined("spec", "ipNetworks"),
			"NATS":         nats,
			"PROFILES":     joined("spec", "profiles"),
			"INTERFACE":    str("spec", "interfaceName"),
		}
	case "HostEndpoint":
		t.ps = []string{"NAME", "NODE"}
		t.wide = []string{"NAME", "NODE", "INTERFACE", "IPS", "PROFILES"}
		t.cols = map[string]column{
			"NODE":      str("spec", "node"),
			"INTERFACE": str("spec", "interfaceName"),
			"IPS":       joined("spec", "expectedIPs"),
			"PROFILES":  joined("spec", "profiles"),
		}
	case v3.KindNetworkPolicy, v3.KindGlobalNetworkPolicy:
		t.wide = []string{"NAME", "ORDER", "SELECTOR"}
		t.cols = map[string]column{
			"ORDER":    str("spec", "order"),
			"SELECTOR": str("spec", "selector"),
			"TIER":     orDefault(str("spec", "tier"), "default"),
		}
	case v3.KindNetworkSet, v3.KindGlobalNetworkSet:
		t.wide = []string{"NAME", "NETS"}
		t.cols = map[string]column{"NETS": truncated(joined("spec", "nets"), 80)}
	case "Profile":
		t.cols = map[string]column{"LABELS": joined("spec", "labelsToApply")}
	case "Tier":
		t.wide = []string{"NAME", "ORDER"}
		t.cols = map[string]column{"ORDER": str("spec", "order")}
	case "IPReservation":
		t.wide = []string{"NAME", "CIDRS"}
		t.cols = map[string]column{"CIDRS": truncated(joined("spec", "reservedCIDRs"), 80)}
	case "ClusterInformation":
		t.wide = []string{"NAME", "CALICOVERSION", "CLUSTERTYPE", "DATASTOREREADY"}
		t.cols = map[string]column{
			"CALICOVERSION":  str("spec", "calicoVersion"),
			"CLUSTERTYPE":    str("spec", "clusterType"),
			"DATASTOREREADY": str("spec", "datastoreReady"),
		}
	}
	for k, v := range common {
		if _, ok := t.cols[k]; !ok {
			t.cols[k] = v
		}
	}
	return t
}

// names lists the columns a kind's table knows, sorted.
func (t table) names() []string {
	out := make([]string, 0, len(t.cols))
	for k := range t.cols {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// get walks a JSON object along path; nil when any step is missing.
func get(obj map[string]any, path ...string) any {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// scalar renders a JSON scalar as text.
func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + scalar(x[k])
		}
		return strings.Join(parts, ",")
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = scalar(e)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

func str(path ...string) column {
	return func(o map[string]any, _ *lookups) string { return scalar(get(o, path...)) }
}

// joined renders a list (or map) field as comma-separated values.
func joined(path ...string) column { return str(path...) }

func boolean(path ...string) column {
	return func(o map[string]any, _ *lookups) string {
		b, _ := get(o, path...).(bool)
		return strconv.FormatBool(b)
	}
}

func orDefault(c column, def string) column {
	return func(o map[string]any, lk *lookups) string {
		if s := c(o, lk); s != "" {
			return s
		}
		return def
	}
}

func orElse(c, other column) column {
	return func(o map[string]any, lk *lookups) string {
		if s := c(o, lk); s != "" {
			return s
		}
		return other(o, lk)
	}
}

func truncated(c column, max int) column {
	return func(o map[string]any, lk *lookups) string {
		s := c(o, lk)
		if len(s) > max {
			return s[:max-3] + "..."
		}
		return s
	}
}

// nats renders a workload endpoint's 1:1 NAT mappings as internal:external.
func nats(o map[string]any, _ *lookups) string {
	list, _ := get(o, "spec", "ipNATs").([]any)
	parts := make([]string, 0, len(list))
	for _, e := range list {
		m, _ := e.(map[string]any)
		parts = append(parts, scalar(m["internalIP"])+":"+scalar(m["externalIP"]))
	}
	return strings.Join(parts, ",")
}
