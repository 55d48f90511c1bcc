package calc

import (
	"net/netip"
	"slices"
	"strings"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Graph is the calculation graph of one node. Feed it with OnUpdates and
// OnInSync (it implements Callbacks), then call Flush to pass what changed
// to the Dataplane. It is not safe for concurrent use: one goroutine owns it.
type Graph struct {
	hostname string
	dp       Dataplane

	labels   *labelIndex
	lb       *lbIndex
	compiler *ruleCompiler
	policies *policyResolver
	out      *sequencer
	overlay  *routeResolver
	hosts    *hostSets

	felixGlobal, felixNode *v3.FelixConfigurationSpec
	// felixLocal is felix's own configuration (environment and file),
	// laid over the datastore's.
	felixLocal *v3.FelixConfigurationSpec
	// serviceRanges are BGPConfiguration default's advertised service
	// ranges, for serviceLoopPrevention.
	serviceRanges        []netip.Prefix
	configDirty          bool
	pools                map[string]v3.IPPoolSpec
	masqSet, allPoolsSet *ipSetState
	inSync               bool
	// otherNodes holds FelixConfiguration node.<name> of other nodes
	// (only an explaining graph is fed them: felix's syncer keeps its
	// own), for explanations of their endpoints.
	otherNodes map[string]*v3.FelixConfigurationSpec
	// nodeNames interns the node names of endpoints.
	nodeNames map[string]string
}

// nodeName returns the interned copy of a node name: 250,000 endpoints
// share a few node names.
func (g *Graph) nodeName(n string) string {
	if s, ok := g.nodeNames[n]; ok {
		return s
	}
	g.nodeNames[n] = n
	return n
}

// NewGraph makes the graph of the node hostname, writing to dp.
func NewGraph(hostname string, dp Dataplane) *Graph {
	out := newSequencer()
	g := &Graph{
		hostname:    hostname,
		dp:          dp,
		labels:      newLabelIndex(out),
		lb:          newLBIndex(),
		compiler:    newRuleCompiler(),
		out:         out,
		configDirty: true,
		pools:       map[string]v3.IPPoolSpec{},
		otherNodes:  map[string]*v3.FelixConfigurationSpec{},
		nodeNames:   map[string]string{},
		overlay:     newRouteResolver(hostname),
	}
	g.compiler.services = g.labels.services
	g.policies = newPolicyResolver(g.labels, g.compiler, out)
	g.policies.peering = newLocalPeering(hostname)
	g.labels.ref(&ipSetSpec{id: IPSetMasqPools, pools: true})
	g.labels.ref(&ipSetSpec{id: IPSetAllPools, pools: true})
	g.masqSet, g.allPoolsSet = g.labels.sets[IPSetMasqPools], g.labels.sets[IPSetAllPools]
	g.hosts = newHostSets(g.labels)
	return g
}

// SetLocalConfig lays felix's local configuration (its FELIX_*
// environment and configuration file, nil for none) over the datastore's
// FelixConfiguration, as Calico's felix: a field it sets wins.
func (g *Graph) SetLocalConfig(spec *v3.FelixConfigurationSpec) {
	g.felixLocal = spec
	g.configDirty = true
}

// Hostname is the node whose graph it is ("" for an explaining graph).
func (g *Graph) Hostname() string { return g.hostname }

// OnInSync records that the datastore has been read completely.
func (g *Graph) OnInSync() { g.inSync = true }

// OnUpdates applies a batch of updates.
func (g *Graph) OnUpdates(updates []Update) {
	for _, u := range updates {
		g.OnUpdate(u)
	}
}

// OnUpdate applies one update.
func (g *Graph) OnUpdate(u Update) {
	k := u.Key
	switch k.Kind {
	case v3.KindWorkloadEndpoint:
		var wep *v3.WorkloadEndpoint
		if u.Value != nil {
			wep = u.Value.(*v3.WorkloadEndpoint)
		}
		g.onWorkloadEndpoint(k, wep)
	case v3.KindHostEndpoint:
		var hep *v3.HostEndpoint
		if u.Value != nil {
			hep = u.Value.(*v3.HostEndpoint)
		}
		g.onHostEndpoint(k, hep)
	case v3.KindNetworkSet, v3.KindGlobalNetworkSet:
		g.onNetworkSet(k, u.Value)
	case v3.KindProfile:
		var p *v3.Profile
		if u.Value != nil {
			p = u.Value.(*v3.Profile)
		}
		g.onProfile(k.Name, p)
	case v3.KindNetworkPolicy, v3.KindGlobalNetworkPolicy:
		g.policies.onPolicy(k, u.Value)
	case v3.KindTier:
		var t *v3.Tier
		if u.Value != nil {
			t = u.Value.(*v3.Tier)
		}
		g.policies.onTier(k.Name, t)
	case v3.KindIPPool:
		g.onIPPool(k.Name, u.Value)
	case v3.KindFelixConfiguration:
		g.onFelixConfiguration(k.Name, u.Value)
	case v3.KindBGPConfiguration:
		if k.Name == "default" {
			bc, _ := u.Value.(*v3.BGPConfiguration)
			g.serviceRanges = serviceRanges(bc)
			g.configDirty = true
			if g.policies.peering.onConfig(bc) {
				g.policies.workloadsChanged()
			}
		}
	case v3.KindBGPPeer:
		p, _ := u.Value.(*v3.BGPPeer)
		if g.policies.peering.onPeer(k.Name, p) {
			g.policies.workloadsChanged()
		}
	case v3.KindNode:
		n, _ := u.Value.(*v3.Node)
		before := g.overlay.nodes[k.Name]
		g.overlay.onNode(k.Name, n)
		if after := g.overlay.nodes[k.Name]; after.addr4 != before.addr4 || after.addr6 != before.addr6 {
			g.lb.dirty = true // the load balancer's tunnel peers
		}
		g.hosts.onNode(k.Name, n)
		if g.policies.peering.onNode(k.Name, n) {
			g.policies.workloadsChanged()
		}
	case KindIPAMBlock:
		if b, ok := u.Value.(*Block); ok {
			g.overlay.onBlock(b.CIDR, b)
		} else if cidr, err := netip.ParsePrefix(k.Name); err == nil {
			g.overlay.onBlock(cidr, nil)
		}
	case KindEndpointSlice:
		s, _ := u.Value.(*EndpointSlice)
		g.labels.services.onSlice(k.Namespace, k.Name, s)
	case KindService:
		s, _ := u.Value.(*Service)
		g.lb.onService(k.Namespace, k.Name, s)
	case KindEndpointSlicesSynced:
		if !g.labels.services.synced {
			g.labels.services.synced = true
			g.labels.services.lbDirty = true
			g.policies.servicesSynced()
		}
	default:
		log.WithField("kind", k.Kind).Debug("Ignoring an update of a kind felix does not use")
	}
}

func itemKey(k datastore.Key) string {
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

func (g *Graph) onWorkloadEndpoint(k datastore.Key, wep *v3.WorkloadEndpoint) {
	id := EndpointID{Kind: WorkloadEndpoint, Namespace: k.Namespace, Name: k.Name}
	if wep == nil {
		g.overlay.onWorkload(itemKey(k), "", nil)
		g.labels.setItem(itemKey(k), nil)
		g.policies.setEndpoint(id, nil)
		return
	}
	it := &item{
		kind: itemWorkload, namespaced: true, ns: k.Namespace, sa: wep.Spec.ServiceAccountName,
		labels: wep.Labels, profiles: wep.Spec.Profiles, nets: prefixes(wep.Spec.IPNetworks),
		node: g.nodeName(wep.Spec.Node), pod: wep.Spec.Pod, iface: wep.Spec.InterfaceName,
	}
	for _, p := range wep.Spec.Ports {
		it.ports = append(it.ports, namedPort{name: p.Name, proto: protoName(p.Protocol), port: p.Port})
	}
	g.labels.setItem(itemKey(k), it)
	g.overlay.onWorkload(itemKey(k), it.node, it.nets)
	if wep.Spec.Node != g.hostname || g.hostname == "" {
		g.policies.setEndpoint(id, nil)
		return
	}
	g.policies.setEndpoint(id, &localEndpoint{
		id: id, it: it, iface: wep.Spec.InterfaceName, mac: wep.Spec.MAC, profiles: wep.Spec.Profiles,
		spoof: spoofPrefixes(id, wep.Spec.AllowSpoofedSourcePrefixes), ipNATs: ipNATs(id, wep.Spec.IPNATs, it.nets),
	})
}

func (g *Graph) onHostEndpoint(k datastore.Key, hep *v3.HostEndpoint) {
	id := EndpointID{Kind: HostEndpoint, Name: k.Name}
	if hep == nil {
		g.labels.setItem(itemKey(k), nil)
		g.policies.setEndpoint(id, nil)
		return
	}
	it := &item{kind: itemHost, labels: hep.Labels, profiles: hep.Spec.Profiles, nets: prefixes(hep.Spec.ExpectedIPs),
		node: g.nodeName(hep.Spec.Node), iface: hep.Spec.InterfaceName}
	for _, p := range hep.Spec.Ports {
		it.ports = append(it.ports, namedPort{name: p.Name, proto: protoName(p.Protocol), port: p.Port})
	}
	g.labels.setItem(itemKey(k), it)
	if hep.Spec.Node != g.hostname || g.hostname == "" {
		g.policies.setEndpoint(id, nil)
		return
	}
	g.policies.setEndpoint(id, &localEndpoint{
		id: id, it: it, iface: hep.Spec.InterfaceName, profiles: hep.Spec.Profiles, host: true,
	})
}

func (g *Graph) onNetworkSet(k datastore.Key, r v3.Resource) {
	if r == nil {
		g.labels.setItem(itemKey(k), nil)
		return
	}
	it := &item{kind: itemNetworkSet, labels: r.GetObjectMeta().Labels}
	switch ns := r.(type) {
	case *v3.NetworkSet:
		it.namespaced, it.ns = true, k.Namespace
		it.nets = prefixes(ns.Spec.Nets)
	case *v3.GlobalNetworkSet:
		it.nets = prefixes(ns.Spec.Nets)
	}
	g.labels.setItem(itemKey(k), it)
}

// onProfile handles a profile's rules (for endpoints that use it) and its
// labels: labelsToApply are inherited by the endpoints listing it; a
// kns.<namespace> profile carries the namespace's labels and a
// ksa.<namespace>.<account> profile the service account's.
func (g *Graph) onProfile(name string, p *v3.Profile) {
	var apply map[string]string
	var own map[string]string
	if p != nil {
		apply, own = p.Spec.LabelsToApply, p.Labels
	}
	x := g.labels
	var affects func(*item) bool
	switch {
	case strings.HasPrefix(name, NamespaceProfilePrefix):
		ns := name[len(NamespaceProfilePrefix):]
		setOrDelete(x.nsLabels, ns, stripPrefix(own, apply, NamespaceLabel))
		affects = func(it *item) bool { return it.namespaced && it.ns == ns || hasProfile(it, name) }
	case strings.HasPrefix(name, ServiceAccountProfilePrefix):
		rest := name[len(ServiceAccountProfilePrefix):]
		if ns, sa, ok := strings.Cut(rest, "."); ok {
			setOrDelete(x.saLabels, ns+"/"+sa, stripPrefix(own, apply, ServiceAccountLabel))
			affects = func(it *item) bool { return it.ns == ns && it.sa == sa || hasProfile(it, name) }
		}
	}
	if affects == nil {
		affects = func(it *item) bool { return hasProfile(it, name) }
	}
	setOrDelete(x.profileLabels, name, apply)
	x.reevaluate(affects)
	g.policies.labelsChanged(affects)
	g.policies.onProfile(name, p)
}

func hasProfile(it *item, name string) bool {
	for _, p := range it.profiles {
		if p == name {
			return true
		}
	}
	return false
}

func setOrDelete(m map[string]map[string]string, k string, v map[string]string) {
	if len(v) == 0 {
		delete(m, k)
		return
	}
	m[k] = v
}

// stripPrefix merges a profile's own labels with its labelsToApply, the
// latter with prefix (pcns./pcsa.) removed.
func stripPrefix(own, apply map[string]string, prefix string) map[string]string {
	if len(own) == 0 && len(apply) == 0 {
		return nil
	}
	out := make(map[string]string, len(own)+len(apply))
	for k, v := range own {
		out[k] = v
	}
	for k, v := range apply {
		out[strings.TrimPrefix(k, prefix)] = v
	}
	return out
}

func (g *Graph) onIPPool(name string, r v3.Resource) {
	pool, _ := r.(*v3.IPPool)
	g.overlay.onPool(name, pool)
	if g.hosts.onPool(name, pool) {
		g.configDirty = true
	}
	if old, ok := g.pools[name]; ok {
		g.poolMembers(old, g.labels.removeMember)
		delete(g.pools, name)
	}
	if r == nil {
		return
	}
	spec := r.(*v3.IPPool).Spec
	g.pools[name] = spec
	g.poolMembers(spec, g.labels.addMember)
}

func (g *Graph) poolMembers(spec v3.IPPoolSpec, f func(*ipSetState, string)) {
	p, err := ParseNet(spec.CIDR)
	if err != nil {
		return
	}
	m := netMember(p)
	f(g.allPoolsSet, m)
	if (spec.NATOutgoing || spec.NATOutgoingV1) && !spec.Disabled {
		f(g.masqSet, m)
	}
}

func (g *Graph) onFelixConfiguration(name string, r v3.Resource) {
	var spec *v3.FelixConfigurationSpec
	if r != nil {
		s := r.(*v3.FelixConfiguration).Spec
		spec = &s
	}
	switch name {
	case "default":
		g.felixGlobal = spec
	case "node." + g.hostname:
		if g.hostname == "" {
			return
		}
		g.felixNode = spec
	default:
		if node, ok := strings.CutPrefix(name, "node."); ok {
			if spec == nil {
				delete(g.otherNodes, node)
			} else {
				g.otherNodes[node] = spec
			}
		}
		return
	}
	g.configDirty = true
}

// Flush passes everything that changed since the last Flush to the
// Dataplane, in dependency order.
func (g *Graph) Flush() {
	g.labels.scanPending()
	g.labels.syncServices()
	if g.configDirty {
		cfg := MergeConfig(g.felixGlobal, g.felixNode, g.felixLocal)
		cfg.SetEncapsulation(g.hosts.encapsulation())
		cfg.SetServiceRanges(g.serviceRanges)
		g.overlay.setRouteSource(cfg.RouteSource == "WorkloadIPs")
		g.hosts.setExternal(cfg.ExternalNodes)
		g.policies.setSpoofAllowed(cfg.WorkloadSourceSpoofing == "Any")
		g.policies.setFloating(cfg.FloatingIPsActive())
		g.dp.OnConfigUpdate(cfg)
		g.configDirty = false
	}
	g.out.flushSets(g.dp)
	g.policies.flush(g.dp)
	g.flushLB()
	if od, ok := g.dp.(OverlayDataplane); ok {
		g.overlay.flush(od)
	}
	g.out.flushSetRemovals(g.dp)
	if g.inSync && !g.out.sentInSync {
		g.out.sentInSync = true
		g.dp.OnInSync()
	}
}

// ipNATs reads a workload's ipNATs. One whose addresses do not parse,
// differ in family, or whose internalIP is not one of the workload's own
// addresses is left out (it would translate to something the workload
// is not), with a warning.
func ipNATs(id EndpointID, in []v3.IPNAT, nets []netip.Prefix) []NAT {
	var out []NAT
	for _, n := range in {
		i, err1 := netip.ParseAddr(n.InternalIP)
		e, err2 := netip.ParseAddr(n.ExternalIP)
		i, e = i.Unmap(), e.Unmap()
		ok := err1 == nil && err2 == nil && i.Is4() == e.Is4() &&
			slices.ContainsFunc(nets, func(p netip.Prefix) bool { return p.Bits() == p.Addr().BitLen() && p.Addr() == i })
		if !ok {
			log.WithFields(log.Fields{"endpoint": id.String(), "internalIP": n.InternalIP, "externalIP": n.ExternalIP}).
				Warn("ipNAT left out: its addresses do not parse, differ in family, or internalIP is not one of the endpoint's addresses")
			continue
		}
		out = append(out, NAT{Internal: i, External: e})
	}
	return out
}

// spoofPrefixes reads allowSpoofedSourcePrefixes; one that does not parse
// is left out (it would only widen what the workload may send).
func spoofPrefixes(id EndpointID, in []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range in {
		p, err := ParseNet(s)
		if err != nil {
			log.WithError(err).WithFields(log.Fields{"endpoint": id.String(), "prefix": s}).Warn("allowSpoofedSourcePrefixes entry left out: it does not parse")
			continue
		}
		out = append(out, p)
	}
	return out
}

func prefixes(in []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(in))
	for _, s := range in {
		if p, err := ParseNet(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}
