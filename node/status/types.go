package status

import "time"

// Peer types, as `calicoctl node status` prints them.
const (
	PeerTypeMesh         = "node-to-node mesh"
	PeerTypeGlobal       = "global"
	PeerTypeNodeSpecific = "node specific"
)

// Peer states in BIRD's words (the STATE column). A session that is
// Established is "up"; the others name where the session is stuck.
const (
	PeerStateUp      = "up"
	PeerStateStart   = "start"
	PeerStateDown    = "down"
	PeerStatePassive = "passive"
)

// PeerStatus is one row of the BGP peer table. node/bgp fills it from its
// router; calicoctl prints it.
type PeerStatus struct {
	// Address is the peer's IP address (with ":port" only when not 179).
	Address string `json:"address"`
	// Type is PeerTypeMesh, PeerTypeGlobal or PeerTypeNodeSpecific.
	Type string `json:"type"`
	// State is the session's short state ("up", "start", ...).
	State string `json:"state"`
	// Since is when the session last changed state, as BIRD prints it
	// ("15:53:18" today, "2024-05-01" before).
	Since string `json:"since"`
	// Info is the BGP FSM state and any last error ("Established",
	// "Active Socket: Connection refused").
	Info string `json:"info"`
	// IPv6 is true for a peer reached over IPv6.
	IPv6 bool `json:"ipv6"`
}

// Report is what a running calico-node says about itself.
type Report struct {
	// NodeName is the name of the Node resource the agent registered.
	NodeName string `json:"nodeName"`
	// PID is the agent's process id.
	PID int `json:"pid"`
	// Started is when the agent started.
	Started time.Time `json:"started"`
	// Backend is the networking backend in use (gobgp, vxlan, none).
	Backend string `json:"backend"`
	// BGPRunning is true when the BGP part is running.
	BGPRunning bool `json:"bgpRunning"`
	// Peers is the BGP peer table (empty when BGP is not running).
	Peers []PeerStatus `json:"peers"`
	// Datastore says whether the datastore answers the agent (nil from an
	// agent that does not report it).
	Datastore *DatastoreStatus `json:"datastore,omitempty"`
	// Routes counts the kernel routes BGP wants and has programmed (nil
	// while BGP writes none).
	Routes *RouteStatus `json:"routes,omitempty"`
}

// RouteStatus counts the kernel routes of the BGP part.
type RouteStatus struct {
	Wanted     int `json:"wanted"`
	Programmed int `json:"programmed"`
}

// DatastoreStatus is whether the agent's datastore answers.
type DatastoreStatus struct {
	// Endpoints are the etcd endpoints the agent uses.
	Endpoints []string `json:"endpoints"`
	// Reachable is false while etcd does not answer the agent's reads.
	Reachable bool `json:"reachable"`
	// Since is when Reachable last changed (or the agent connected).
	Since time.Time `json:"since"`
	// Error is the last failed read's error while unreachable.
	Error string `json:"error,omitempty"`
}

// SplitPeers returns the IPv4 and IPv6 peers of peers, in their order.
func SplitPeers(peers []PeerStatus) (v4, v6 []PeerStatus) {
	for _, p := range peers {
		if p.IPv6 {
			v6 = append(v6, p)
		} else {
			v4 = append(v4, p)
		}
	}
	return v4, v6
}

// FormatSince renders t as the SINCE column does: the time of day when t
// is on the same day as now, the date otherwise.
func FormatSince(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	y1, m1, d1 := t.Date()
	y2, m2, d2 := now.Date()
	if y1 == y2 && m1 == m2 && d1 == d2 {
		return t.Format("15:04:05")
	}
	return t.Format("2006-01-02")
}
