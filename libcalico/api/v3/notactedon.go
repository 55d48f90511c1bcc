package v3

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
)

// NotActedOn is the one table of fields Palisade accepts (so Calico's YAML
// applies unchanged) but does not act on yet, by kind and JSON field path.
// calicoctl warns about them on apply, create and replace, the agent logs
// them, and docs/not-acted-on.md lists them. When a component starts acting
// on a field, delete its row here (for FelixConfiguration: add it to
// FelixConfigurationActedOn) and from the docs page in the same change;
// TestNotActedOnDocumented keeps the two in step.
var NotActedOn = map[string][]string{
	KindFelixConfiguration: felixConfigurationNotActedOn(),
	KindBGPConfiguration: {
		"spec.ipv4NormalRoutePriority",
		"spec.ipv6NormalRoutePriority",
	},
	KindBGPFilter: bgpFilterNotActedOn(),
	KindIPAMConfiguration: {
		"spec.kubeVirtVMAddressPersistence",
	},
	KindWorkloadEndpoint: {
		"spec.qosControls",
	},
	KindKubeControllersConfiguration: {
		// calico-kube-controllers has no profiling endpoint; host endpoint
		// templates only matter with autoCreate, which it refuses.
		"spec.debugProfilePort",
		"spec.controllers.node.hostEndpoint.templates",
		"spec.controllers.node.hostEndpoint.createDefaultHostEndpoint",
		// Palisade stores no policy under Calico's old-style names.
		"spec.controllers.policyMigration",
	},
}

// FelixConfigurationActedOn names, by JSON name, the FelixConfiguration
// spec fields Palisade acts on. Every other field of the spec is accepted
// and not acted on: it is a row of NotActedOn, calicoctl names it at apply
// and felix names it in its log.
var FelixConfigurationActedOn = map[string]bool{
	"debugHost": true, "debugPort": true,
	"ipv6Support": true, "routeRefreshInterval": true, "iptablesRefreshInterval": true, "ipsetsRefreshInterval": true,
	"iptablesBackend": true, "interfacePrefix": true, "interfaceExclude": true, "chainInsertMode": true,
	"defaultEndpointToHostAction": true, "iptablesFilterAllowAction": true, "iptablesMangleAllowAction": true,
	"iptablesFilterDenyAction": true, "iptablesMarkMask": true, "logSeverityScreen": true,
	"failsafeInboundHostPorts": true, "failsafeOutboundHostPorts": true, "workloadSourceSpoofing": true,
	// WorkloadEndpoint ipNATs (felix/calc, the nat table's cali-fip-*).
	"floatingIPs": true,
	// cali-INPUT's VXLAN source check and the workload VXLAN drop
	// (felix/rules/encap.go); cali-nat-outgoing (felix/rules/natoutgoing.go).
	"allowVXLANPacketsFromWorkloads": true, "externalNodesList": true,
	"natOutgoingExclusions": true, "natPortRange": true, "natOutgoingAddress": true, "iptablesNATOutgoingInterfaceFilter": true,
	// MASQFullyRandom, SNATFullyRandom, TCX and Palisade's BPFLoop (other
	// features are warned about).
	"featureDetectOverride": true,
	// cali-cidr-block (felix/rules/cidrblock.go).
	"serviceLoopPrevention": true,
	// The rescan of host endpoints named by expectedIPs (felix/dataplane).
	"interfaceRefreshInterval": true,
	// The maxelem of IP sets (felix/dataplane/ipsets).
	"maxIpsetSize": true,
	// The Go runtime of the calico-node process (libcalico/goruntime).
	"goGCThreshold": true, "goMemoryLimitMB": true, "goMaxProcs": true,
	// The route tables Calico's felix gives WireGuard, kept empty and
	// without their rule as Calico's felix keeps them with WireGuard off
	// (felix/dataplane/routes/tables.go).
	"routeTableRanges": true, "routeTableRange": true, "wireguardRoutingRulePriority": true,
	// Workload routes (felix/dataplane/routes).
	"deviceRouteProtocol": true, "deviceRouteSourceAddress": true, "deviceRouteSourceAddressIPv6": true, "removeExternalRoutes": true,
	// routeSource WorkloadIPs: overlay routes by workload address
	// (felix/calc/overlay.go).
	"routeSource": true,
	// The VXLAN overlay (felix/dataplane/vxlan).
	"vxlanEnabled": true, "vxlanMTU": true, "vxlanMTUV6": true, "vxlanPort": true, "vxlanVNI": true, "mtuIfacePattern": true,
	// The eBPF dataplane's.
	"bpfEnabled": true, "bpfAttachType": true, "bpfMapSizeConntrack": true, "bpfMapSizeIPSets": true, "bpfConntrackTimeouts": true,
	"bpfHostConntrackBypass": true, "bpfDataIfacePattern": true, "bpfRedirectToPeer": true, "bpfL3IfacePattern": true,
	"bpfKubeProxyIptablesCleanupEnabled": true,
	// The connect-time load balancer (felix/dataplane/bpf/ctlb.go).
	"bpfConnectTimeLoadBalancing": true, "bpfHostNetworkedNATWithoutCTLB": true, "bpfConnectTimeLoadBalancingEnabled": true,
	"cgroupV2Path": true,
	// The load balancer of Services (felix/dataplane/bpf/services.go).
	"bpfExternalServiceMode": true, "bpfDSROptoutCIDRs": true, "bpfMaglevMaxEndpointsPerService": true, "bpfMaglevMaxServices": true, "bpfExpediteAttach": true,
	"bpfMapSizeNATFrontend": true, "bpfMapSizeNATBackend": true, "bpfMapSizeNATAffinity": true,
	// Health and Prometheus metrics (docs/metrics.md).
	"healthEnabled": true, "healthHost": true, "healthPort": true, "healthTimeoutOverrides": true,
	"prometheusMetricsEnabled": true, "prometheusMetricsHost": true, "prometheusMetricsPort": true,
	"prometheusGoMetricsEnabled": true, "prometheusProcessMetricsEnabled": true,
}

// felixConfigurationNotActedOn is every FelixConfiguration spec field not
// in FelixConfigurationActedOn, as "spec.<name>" rows in field order.
func felixConfigurationNotActedOn() []string {
	var out []string
	t := reflect.TypeFor[FelixConfigurationSpec]()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && !FelixConfigurationActedOn[name] {
			out = append(out, "spec."+name)
		}
	}
	return out
}

// bgpFilterNotActedOn are the BGPFilter rule fields calico-node's BGP
// filters do not apply yet, in every rule list: a rule that sets one is
// applied as if it were unset.
func bgpFilterNotActedOn() []string {
	var out []string
	for _, list := range []string{"exportV4", "importV4", "exportV6", "importV6"} {
		for _, f := range []string{"peerType", "communities", "asPathPrefix", "priority", "operations"} {
			out = append(out, "spec."+list+"[]."+f)
		}
	}
	return out
}

// metadataNotActedOn are the Kubernetes object metadata fields of every
// kind that Palisade keeps as given but does not act on.
var metadataNotActedOn = []string{
	"metadata.generation", "metadata.ownerReferences", "metadata.finalizers", "metadata.managedFields",
	"metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds", "metadata.generateName", "metadata.selfLink",
}

// NotActedOnFields returns the fields set in r that Palisade accepts but
// does not act on, as rows of the NotActedOn table (or metadata paths),
// sorted and without duplicates.
func NotActedOnFields(r Resource) []string {
	info, ok := KindOf(r)
	if !ok {
		return nil
	}
	obj, err := toGeneric(r)
	if err != nil {
		return nil
	}
	found := map[string]bool{}
	for _, row := range append(append([]string{}, NotActedOn[info.Kind]...), metadataNotActedOn...) {
		if isSet(obj, strings.Split(row, ".")) {
			found[row] = true
		}
	}
	out := make([]string, 0, len(found))
	for f := range found {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

func toGeneric(r Resource) (map[string]any, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// isSet reports whether the path (whose last element may end in "*", a
// prefix of field names) is present in obj. An element ending in "[]"
// names a list: the rest of the path is looked for in each of its items.
func isSet(obj map[string]any, path []string) bool {
	v, ok := any(obj), true
	for i, p := range path {
		if name, list := strings.CutSuffix(p, "[]"); list {
			m, isMap := v.(map[string]any)
			if !isMap {
				return false
			}
			items, _ := m[name].([]any)
			for _, it := range items {
				if im, isMap := it.(map[string]any); isMap && isSet(im, path[i+1:]) {
					return true
				}
			}
			return false
		}
		m, isMap := v.(map[string]any)
		if !isMap {
			return false
		}
		if i == len(path)-1 {
			if prefix, wild := strings.CutSuffix(p, "*"); wild {
				for k := range m {
					if strings.HasPrefix(k, prefix) {
						return true
					}
				}
				return false
			}
		}
		if v, ok = m[p]; !ok {
			return false
		}
	}
	return true
}
