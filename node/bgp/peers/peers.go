// Package peers computes, purely from projectcalico.org/v3 resources, the BGP
// sessions one node should have: the node-to-node mesh, global and
// node-specific BGPPeers (by spec.node, nodeSelector and peerSelector) and the
// route-reflector client relations of in-cluster route reflectors.
//
// Nothing here talks to a datastore or a BGP daemon; the result is compared
// with what the router has by the reconciler.
package peers

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/selector"
)

// DefaultRestartTime is the graceful restart time of a session whose
// resource sets none, as in Calico.
const DefaultRestartTime = 120 * time.Second

// Type is how a session came about; `calicoctl node status` prints it.
type Type string

// The session types, spelled as `calicoctl node status` prints them.
const (
	TypeMesh         Type = "node-to-node mesh"
	TypeGlobal       Type = "global"
	TypeNodeSpecific Type = "node specific"
	// TypeLocalWorkload is a session with a BGP speaker running in a
	// workload of this node (BGPPeer localWorkloadSelector).
	TypeLocalWorkload Type = "local workload"
)

// Peer is one desired BGP session.
type Peer struct {
	// Name says where the session comes from: "Mesh_<node>" for the mesh,
	// "Global_<bgppeer>" or "Node_<bgppeer>" for BGPPeers (with the selected
	// node appended for peerSelector peers). Informational.
	Name    string     `json:"name"`
	Address netip.Addr `json:"address"`
	// Port is the peer's BGP port; 0 means the default (179).
	Port uint16 `json:"port,omitempty"`
	// AS is the peer's AS number; LocalAS ours for this session.
	AS      uint32 `json:"as"`
	LocalAS uint32 `json:"localAS"`
	Type    Type   `json:"type"`
	// EBGP is true when AS differs from LocalAS.
	EBGP bool `json:"ebgp,omitempty"`
	// RRClient makes the peer a route-reflector client of this node.
	RRClient bool `json:"rrClient,omitempty"`
	// ClusterID is this node's route-reflector cluster ID, set on RR client
	// sessions.
	ClusterID string `json:"clusterID,omitempty"`
	// Password is the TCP MD5 password; PasswordRef names the secret key it
	// came from (the password itself never appears in golden files).
	Password    string `json:"-"`
	PasswordRef string `json:"passwordRef,omitempty"`
	// KeepaliveTime is the keepalive interval; 0 means the router default.
	KeepaliveTime time.Duration `json:"-"`
	// RestartTime is the graceful restart time announced to the peer.
	RestartTime time.Duration `json:"-"`
	// KeepOriginalNextHop keeps the next hop of routes sent to this peer.
	KeepOriginalNextHop bool `json:"keepOriginalNextHop,omitempty"`
	// NextHopSelf makes this node the next hop of every route sent to
	// this peer (BGPPeer nextHopMode Self), reflected iBGP routes too.
	NextHopSelf bool `json:"nextHopSelf,omitempty"`
	// SourceAddress is the local address of the session (the node's
	// address of the peer's family); invalid when unset.
	SourceAddress netip.Addr `json:"sourceAddress,omitzero"`
	// AllowASIn is how many times our AS may appear in received paths.
	AllowASIn uint8 `json:"allowASIn,omitempty"`
	// TTLSecurity turns on GTSM (RFC 5082) for a peer this many hops away:
	// packets leave with TTL 255 and arrive with at least 256 minus it.
	// 0 is off.
	TTLSecurity uint8 `json:"ttlSecurity,omitempty"`
	// Node is the cluster node at Address, when it is one: both ends are
	// Palisade nodes, computing the same sessions.
	Node string `json:"node,omitempty"`
	// ReachableBy (BGPPeer reachableBy) is the gateway through which the
	// peer is reached: the node routes the peer's address (a /32 or
	// /128) through it, so that no route learned over BGP can take the
	// session's own path away (Calico's static route toward the peer).
	// Invalid when unset.
	ReachableBy netip.Addr `json:"reachableBy,omitzero"`
	// Passive makes this end wait for the peer to connect. Between two
	// nodes only the one with the higher address connects (as Calico's
	// mesh does): the two never open a connection each at the same time,
	// which GoBGP, having no collision detection, resolves by closing
	// both. Between a route reflector and its client node, the reflector
	// connects.
	Passive bool `json:"passive,omitempty"`
}

// MarshalJSON writes the durations the way resources spell them ("120s").
func (p Peer) MarshalJSON() ([]byte, error) {
	type plain Peer
	out := struct {
		plain
		KeepaliveTime string `json:"keepaliveTime,omitempty"`
		RestartTime   string `json:"restartTime"`
	}{plain: plain(p), RestartTime: p.RestartTime.String()}
	if p.KeepaliveTime != 0 {
		out.KeepaliveTime = p.KeepaliveTime.String()
	}
	return json.Marshal(out)
}

// Key identifies a session: one per address and port.
func (p Peer) Key() string {
	return netip.AddrPortFrom(p.Address, p.Port).String()
}

// Ignored lists the fields of a BGPPeer that are set but not acted on,
// each with what happens instead, so that the node can say so: those of
// v3.NotActedOn, and values of fields otherwise acted on.
func Ignored(bp v3.BGPPeer) []string {
	var out []string
	for _, f := range v3.NotActedOnFields(&bp) {
		if strings.HasPrefix(f, "spec.") {
			out = append(out, f+" is not acted on")
		}
	}
	return out
}

// Input is everything the peer set depends on.
type Input struct {
	// NodeName is this node.
	NodeName string
	// Nodes are all Nodes, this one included.
	Nodes []v3.Node
	// Peers are all BGPPeers.
	Peers []v3.BGPPeer
	// Config is the cluster's "default" BGPConfiguration spec (nil when
	// there is none).
	Config *v3.BGPConfigurationSpec
	// Password resolves a secret key reference; nil or a false result
	// leaves the session without a password.
	Password func(ref v3.SecretKeySelector) (string, bool)
	// Workloads are this node's WorkloadEndpoints, which BGPPeers with a
	// localWorkloadSelector make BGP peers of the node.
	Workloads []v3.WorkloadEndpoint
}

// Local is this node's own BGP identity.
type Local struct {
	AS        uint32       `json:"as"`
	IPv4      netip.Prefix `json:"ipv4,omitzero"`
	IPv6      netip.Prefix `json:"ipv6,omitzero"`
	ClusterID string       `json:"clusterID,omitempty"`
	// RouterID is the IPv4 address (or, lacking one, derived elsewhere).
	RouterID netip.Addr `json:"routerID,omitzero"`
}

// nodeInfo is a Node's parsed BGP identity.
type nodeInfo struct {
	name      string
	labels    map[string]string
	as        uint32
	v4, v6    netip.Prefix
	clusterID string
}

// Result is the desired state of this node's BGP speaker.
type Result struct {
	Local Local  `json:"local"`
	Peers []Peer `json:"peers"`
	// Filters names, per session (by Peer.Key), the BGPFilters its BGPPeer
	// lists, in order; sessions without filters are absent.
	Filters map[string][]string `json:"filters,omitempty"`
}

// Compute returns this node's identity and its desired sessions, sorted by
// address and port. A node without BGP configuration (no spec.bgp) has no
// sessions. Invalid resources are skipped, and reported in the error slice
// so the caller can log them; they never stop the others from peering.
func Compute(in Input) (Result, []error) {
	var errs []error
	defAS := uint32(in.Config.AS())
	nodes := make(map[string]nodeInfo, len(in.Nodes))
	byAddr := make(map[netip.Addr]nodeInfo)
	for i := range in.Nodes {
		n := &in.Nodes[i]
		ni, err := parseNode(n, defAS)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		nodes[n.Name] = ni
		if ni.v4.IsValid() {
			byAddr[ni.v4.Addr()] = ni
		}
		if ni.v6.IsValid() {
			byAddr[ni.v6.Addr()] = ni
		}
	}
	me, ok := nodes[in.NodeName]
	if !ok || (!me.v4.IsValid() && !me.v6.IsValid()) {
		return Result{}, errs
	}
	local := Local{AS: me.as, IPv4: me.v4, IPv6: me.v6, ClusterID: me.clusterID}
	if me.v4.IsValid() {
		local.RouterID = me.v4.Addr()
	}

	b := builder{me: me, byAddr: byAddr, password: in.Password, peers: map[string]Peer{}, filters: map[string][]string{}}
	b.localPeering4, b.localPeering6 = in.Config.LocalWorkloadPeeringIPs()
	b.workloads = localWorkloadPeers(in, me)

	// Explicit peers first; the mesh only adds sessions to addresses no
	// BGPPeer already covers.
	for i := range in.Peers {
		bp := &in.Peers[i]
		if err := b.addBGPPeer(bp, nodes); err != nil {
			errs = append(errs, err)
		}
	}
	if in.Config.NodeToNodeMesh() {
		restart := DefaultRestartTime
		if in.Config != nil && in.Config.NodeMeshMaxRestartTime != nil {
			restart = in.Config.NodeMeshMaxRestartTime.Duration
		}
		var pw, ref string
		if in.Config != nil && in.Config.NodeMeshPassword != nil {
			pw, ref = b.resolve(in.Config.NodeMeshPassword)
		}
		for _, other := range sortedNodes(nodes) {
			if other.name == me.name {
				continue
			}
			for _, addr := range []netip.Prefix{other.v4, other.v6} {
				if !addr.IsValid() {
					continue
				}
				b.add(Peer{
					Name: "Mesh_" + other.name, Address: addr.Addr(), AS: other.as,
					Type: TypeMesh, RestartTime: restart, Password: pw, PasswordRef: ref,
					SourceAddress: netip.IPv4Unspecified(),
				}, false, nil)
			}
		}
	}

	out := make([]Peer, 0, len(b.peers))
	for _, p := range b.peers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].Address.Compare(out[j].Address); c != 0 {
			return c < 0
		}
		return out[i].Port < out[j].Port
	})
	res := Result{Local: local, Peers: out}
	for _, p := range out {
		if fs := b.filters[p.Key()]; len(fs) > 0 {
			if res.Filters == nil {
				res.Filters = map[string][]string{}
			}
			res.Filters[p.Key()] = fs
		}
	}
	return res, errs
}

// builder accumulates the peer set.
type builder struct {
	me       nodeInfo
	byAddr   map[netip.Addr]nodeInfo
	password func(v3.SecretKeySelector) (string, bool)
	peers    map[string]Peer
	// filters are the BGPFilter names of the sessions that have some.
	filters map[string][]string
	// localPeering4/6 are the node-side addresses of local workload
	// peerings (invalid: none of the family); workloads the local
	// workloads each BGPPeer makes peers, by BGPPeer name.
	localPeering4, localPeering6 netip.Addr
	workloads                    map[string][]netip.Addr
}

// add fills in the session's local side and stores it unless it is a
// session with ourselves, one our family cannot carry, or (for the mesh) one
// an explicit BGPPeer already set up; filters are its BGPFilters.
func (b *builder) add(p Peer, override bool, filters []string) {
	if p.Address == b.me.v4.Addr() || p.Address == b.me.v6.Addr() {
		return
	}
	var src netip.Prefix
	if p.Address.Is4() {
		src = b.me.v4
	} else {
		src = b.me.v6
	}
	if !src.IsValid() {
		return
	}
	if p.LocalAS == 0 {
		p.LocalAS = b.me.as
	}
	p.EBGP = p.AS != p.LocalAS
	if p.SourceAddress.IsValid() && p.Type != TypeLocalWorkload {
		p.SourceAddress = src.Addr()
	}
	if other, ok := b.byAddr[p.Address]; ok && p.Port == 0 {
		p.Node = other.name
		p.Passive = src.Addr().Less(p.Address)
		// Between a route reflector and a node that is its client
		// (neither a reflector), the reflector connects, whichever
		// address is higher: its fast path holds the session, and dials.
		if p.Type != TypeMesh && !p.EBGP {
			switch {
			case b.me.clusterID != "" && other.clusterID == "":
				p.Passive = false
			case b.me.clusterID == "" && other.clusterID != "":
				p.Passive = true
			}
		}
	}
	// A route reflector treats every iBGP peer outside its cluster as a
	// client (the mesh is a full mesh: nobody reflects there).
	if p.Type != TypeMesh && b.me.clusterID != "" && !p.EBGP {
		if other, ok := b.byAddr[p.Address]; !ok || other.clusterID != b.me.clusterID {
			p.RRClient = true
			p.ClusterID = b.me.clusterID
		}
	}
	if _, taken := b.peers[p.Key()]; taken && !override {
		return
	}
	b.peers[p.Key()] = p
	if len(filters) > 0 {
		b.filters[p.Key()] = filters
	} else {
		delete(b.filters, p.Key())
	}
}

// resolve reads a password: inline, or through its secret reference.
func (b *builder) resolve(pw *v3.BGPPassword) (string, string) {
	if pw == nil {
		return "", ""
	}
	if pw.SecretKeyRef == nil {
		return pw.Value, "inline"
	}
	ref := pw.SecretKeyRef.Name + "/" + pw.SecretKeyRef.Key
	if b.password == nil {
		return "", ref
	}
	v, ok := b.password(*pw.SecretKeyRef)
	if !ok {
		return "", ref
	}
	return v, ref
}

// addBGPPeer adds the sessions one BGPPeer gives this node.
func (b *builder) addBGPPeer(bp *v3.BGPPeer, nodes map[string]nodeInfo) error {
	s := &bp.Spec
	typ := TypeGlobal
	name := "Global_" + bp.Name
	// applies says whether the BGPPeer's node side selects a node.
	applies := func(nodeInfo) bool { return true }
	switch {
	case s.Node != "":
		typ, name = TypeNodeSpecific, "Node_"+bp.Name
		applies = func(n nodeInfo) bool { return n.name == s.Node }
	case s.NodeSelector != "":
		sel, err := selector.Parse(s.NodeSelector)
		if err != nil {
			return fmt.Errorf("bgppeer %q: spec.nodeSelector %q: %w", bp.Name, s.NodeSelector, err)
		}
		typ, name = TypeNodeSpecific, "Node_"+bp.Name
		applies = func(n nodeInfo) bool { return sel.Evaluate(n.labels) }
	}
	template := Peer{
		Type:        typ,
		RestartTime: DefaultRestartTime,
		// nextHopMode Keep is the newer spelling of keepOriginalNextHop.
		KeepOriginalNextHop: s.KeepOriginalNextHop || (s.NextHopMode != nil && *s.NextHopMode == v3.NextHopKeep),
		NextHopSelf:         s.NextHopMode != nil && *s.NextHopMode == v3.NextHopSelf,
	}
	if s.MaxRestartTime != nil {
		template.RestartTime = s.MaxRestartTime.Duration
	}
	if s.KeepaliveTime != nil {
		template.KeepaliveTime = s.KeepaliveTime.Duration
	}
	if s.NumAllowedLocalASNumbers != nil && *s.NumAllowedLocalASNumbers > 0 {
		n := *s.NumAllowedLocalASNumbers
		if n > 255 {
			n = 255
		}
		template.AllowASIn = uint8(n)
	}
	if s.TTLSecurity != nil {
		template.TTLSecurity = *s.TTLSecurity
	}
	if s.LocalASNumber != nil {
		// The AS this node presents to the peer instead of its own.
		template.LocalAS = uint32(*s.LocalASNumber)
	}
	template.Password, template.PasswordRef = b.resolve(s.Password)
	if s.SourceAddress != v3.SourceAddressNone {
		// Marker: add replaces it with the node's address of the family.
		template.SourceAddress = netip.IPv4Unspecified()
	}

	if s.LocalWorkloadSelector != "" {
		// The node listens for the workload's speaker, which connects to
		// the peering address on the workload's interface (felix puts it
		// there).
		for _, addr := range b.workloads[bp.Name] {
			src := b.localPeering4
			if addr.Is6() {
				src = b.localPeering6
			}
			p := template
			p.Type = TypeLocalWorkload
			p.Name = "Local_Workload_" + strings.NewReplacer(".", "_", ":", "_").Replace(addr.String())
			p.Address, p.AS, p.SourceAddress, p.Passive = addr, uint32(s.ASNumber), src, true
			b.add(p, true, s.Filters)
		}
		return nil
	}
	if s.PeerSelector != "" {
		sel, err := selector.Parse(s.PeerSelector)
		if err != nil {
			return fmt.Errorf("bgppeer %q: spec.peerSelector %q: %w", bp.Name, s.PeerSelector, err)
		}
		// Forward: this node peers with the selected nodes. Reverse
		// (reversePeering Auto, the default): a selected node peers back
		// with every node the BGPPeer applies to, so both ends configure
		// the session. With Manual the reverse side needs a BGPPeer of
		// its own.
		reverse := s.ReversePeering == nil || *s.ReversePeering != v3.ReversePeeringManual
		meApplies, meSelected := applies(b.me), sel.Evaluate(b.me.labels)
		for _, other := range sortedNodes(nodes) {
			if other.name == b.me.name {
				continue
			}
			if !(meApplies && sel.Evaluate(other.labels)) && !(reverse && meSelected && applies(other)) {
				continue
			}
			for _, addr := range []netip.Prefix{other.v4, other.v6} {
				if !addr.IsValid() {
					continue
				}
				p := template
				p.Name = name + "_" + other.name
				p.Address = addr.Addr()
				p.AS = other.as
				b.add(p, true, s.Filters)
			}
		}
		return nil
	}
	if !applies(b.me) {
		return nil
	}
	addr, port, err := v3.SplitPeerIP(s.PeerIP)
	if err != nil {
		return fmt.Errorf("bgppeer %q: spec.peerIP %q: %w", bp.Name, s.PeerIP, err)
	}
	p := template
	p.Name, p.Address, p.Port = name, addr.Unmap(), port
	if s.ReachableBy != "" {
		gw, err := netip.ParseAddr(s.ReachableBy)
		if err != nil || gw.Unmap().Is4() != p.Address.Is4() {
			return fmt.Errorf("bgppeer %q: spec.reachableBy %q: not an address of the peer's family", bp.Name, s.ReachableBy)
		}
		p.ReachableBy = gw.Unmap()
	}
	p.AS = uint32(s.ASNumber)
	if p.AS == 0 {
		p.AS = b.me.as
	}
	b.add(p, true, s.Filters)
	return nil
}

// parseNode reads a Node's BGP identity.
func parseNode(n *v3.Node, defAS uint32) (nodeInfo, error) {
	ni := nodeInfo{name: n.Name, labels: n.Labels, as: defAS}
	if n.Spec.BGP == nil {
		return ni, nil
	}
	bgp := n.Spec.BGP
	if bgp.ASNumber != nil {
		ni.as = uint32(*bgp.ASNumber)
	}
	ni.clusterID = bgp.RouteReflectorClusterID
	var err error
	if bgp.IPv4Address != "" {
		if ni.v4, err = parseAddr(bgp.IPv4Address); err != nil || !ni.v4.Addr().Is4() {
			return ni, fmt.Errorf("node %q: spec.bgp.ipv4Address %q: not an IPv4 address", n.Name, bgp.IPv4Address)
		}
	}
	if bgp.IPv6Address != "" {
		if ni.v6, err = parseAddr(bgp.IPv6Address); err != nil || !ni.v6.Addr().Is6() {
			return ni, fmt.Errorf("node %q: spec.bgp.ipv6Address %q: not an IPv6 address", n.Name, bgp.IPv6Address)
		}
	}
	return ni, nil
}

// parseAddr reads "10.0.0.1/24" or a bare address (taken as a host
// prefix).
func parseAddr(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// sortedNodes lists nodes by name, for a stable order.
func sortedNodes(m map[string]nodeInfo) []nodeInfo {
	out := make([]nodeInfo, 0, len(m))
	for _, n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// localWorkloadPeers lists, by BGPPeer name, the addresses of this node's
// workloads that a BGPPeer's localWorkloadSelector makes BGP peers of the
// node (v3.LocalWorkloadPeer decides, as felix does): the first address of
// each family for which BGPConfiguration sets a peering address, as
// Calico takes a workload's first IPv4 and IPv6 networks.
func localWorkloadPeers(in Input, me nodeInfo) map[string][]netip.Addr {
	var local []*v3.BGPPeer
	for i := range in.Peers {
		if in.Peers[i].Spec.LocalWorkloadSelector != "" {
			local = append(local, &in.Peers[i])
		}
	}
	if len(local) == 0 {
		return nil
	}
	v4, v6 := in.Config.LocalWorkloadPeeringIPs()
	out := map[string][]netip.Addr{}
	for i := range in.Workloads {
		w := &in.Workloads[i]
		if w.Spec.Node != in.NodeName {
			continue
		}
		p := v3.LocalWorkloadPeer(local, in.NodeName, me.labels, w.Labels)
		if p == nil {
			continue
		}
		var have4, have6 bool
		for _, n := range w.Spec.IPNetworks {
			pfx, err := parseAddr(n)
			if err != nil {
				continue
			}
			a := pfx.Addr().Unmap()
			switch {
			case a.Is4() && v4.IsValid() && !have4:
				have4 = true
				out[p.Name] = append(out[p.Name], a)
			case a.Is6() && v6.IsValid() && !have6:
				have6 = true
				out[p.Name] = append(out[p.Name], a)
			}
		}
	}
	return out
}
