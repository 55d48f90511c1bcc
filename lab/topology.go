package lab

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Names of the resources the lab applies.
const (
	rrPeerName     = "bgppeer-global-rr"
	borderPeerName = "bgppeer-global-border"
	nodeRRPeerName = "peer-with-route-reflectors"
)

// nodeRRClusterID is the route-reflector cluster ID of the reflectors in
// the PeeringNodeRR topology.
const nodeRRClusterID = "224.0.0.1"

// nodeRRs are the nodes that reflect in the PeeringNodeRR topology: the
// first two (one in a lab of two: a client needs a reflector to peer
// with).
func nodeRRs(nodes []Node) []Node {
	if len(nodes) >= 3 {
		return nodes[:2]
	}
	return nodes[:1]
}

func nodeRRPeerYAML() string {
	return fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata:
  name: %s
spec:
  nodeSelector: all()
  peerSelector: route-reflector == 'true'
`, nodeRRPeerName)
}

func bgpConfigYAML(mesh bool) string {
	return fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata:
  name: default
spec:
  logSeverityScreen: Info
  nodeToNodeMeshEnabled: %v
  asNumber: %d
`, mesh, ClusterAS)
}

func bgpPeerYAML(name, ip string, as int) string {
	return fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata:
  name: %s
spec:
  peerIP: %s
  asNumber: %d
`, name, ip, as)
}

// applyTopology writes the initial BGP resources with calicoctl.
func (l *Lab) applyTopology(ctx context.Context, peering string) error {
	if l.st.Options.Border {
		l.say("calicoctl apply: BGPPeer %s (%s, AS %d) for every node", borderPeerName, borderAddr, BorderAS)
		if err := l.Apply(ctx, bgpPeerYAML(borderPeerName, borderAddr.String(), BorderAS)); err != nil {
			return err
		}
	}
	switch peering {
	case PeeringRR:
		return l.switchToRR(ctx, false)
	case PeeringNodeRR:
		return l.useNodeRR(ctx)
	}
	return l.switchToMesh(ctx, false)
}

// useNodeRR makes the reflector nodes reflect for every node, the mesh off
// (when the lab starts: each reflector is patched as soon as its Node
// exists; the BGPPeer and the mesh off come first).
func (l *Lab) useNodeRR(ctx context.Context) error {
	l.say("calicoctl apply: BGPPeer %s (peerSelector route-reflector == 'true'), BGPConfiguration default nodeToNodeMeshEnabled: false", nodeRRPeerName)
	if err := l.Apply(ctx, nodeRRPeerYAML()); err != nil {
		return err
	}
	if err := l.Apply(ctx, bgpConfigYAML(false)); err != nil {
		return err
	}
	l.setPeering(PeeringNodeRR)
	return nil
}

// makeReflector gives a node the reflectors' cluster ID and label (its
// Node resource must exist).
func (l *Lab) makeReflector(ctx context.Context, n Node) error {
	l.say("calicoctl patch node %s: routeReflectorClusterID %s, label route-reflector=true", n.Name, nodeRRClusterID)
	patch := fmt.Sprintf(`{"metadata":{"labels":{"route-reflector":"true"}},"spec":{"bgp":{"routeReflectorClusterID":%q}}}`, nodeRRClusterID)
	_, err := l.Calicoctl(ctx, l.Nodes()[0].Name, nil, "patch", "node", n.Name, "-p", patch)
	return err
}

// UseRouteReflector switches a running lab to the route reflector: the
// global BGPPeer first, then the mesh off; it waits for the sessions.
func (l *Lab) UseRouteReflector(ctx context.Context) error {
	if l.st.Options.RR == RRNone {
		return fmt.Errorf("lab %s has no route reflector (up --rr bird2 or bird1)", l.st.Name)
	}
	return l.switchToRR(ctx, true)
}

// UseMesh switches a running lab to the full node-to-node mesh: the mesh
// on first, then the route reflector peer deleted; it waits for the
// sessions.
func (l *Lab) UseMesh(ctx context.Context) error { return l.switchToMesh(ctx, true) }

func (l *Lab) switchToRR(ctx context.Context, wait bool) error {
	l.say("calicoctl apply: BGPPeer %s (%s, AS %d), then BGPConfiguration default nodeToNodeMeshEnabled: false", rrPeerName, rrAddr, ClusterAS)
	if err := l.Apply(ctx, bgpPeerYAML(rrPeerName, rrAddr.String(), ClusterAS)); err != nil {
		return err
	}
	if wait {
		// Both topologies at once until every node reaches the reflector,
		// so routes never go missing during the switch.
		if err := l.waitPeer(ctx, rrAddr, 60*time.Second); err != nil {
			return err
		}
	}
	if err := l.Apply(ctx, bgpConfigYAML(false)); err != nil {
		return err
	}
	l.setPeering(PeeringRR)
	if wait {
		_, err := l.WaitSessions(ctx, 60*time.Second)
		return err
	}
	return nil
}

func (l *Lab) switchToMesh(ctx context.Context, wait bool) error {
	l.say("calicoctl apply: BGPConfiguration default nodeToNodeMeshEnabled: true")
	if err := l.Apply(ctx, bgpConfigYAML(true)); err != nil {
		return err
	}
	if wait && l.Peering() == PeeringRR {
		// Both topologies at once until the mesh is up.
		l.setPeering(PeeringMesh)
		for _, n := range l.Nodes() {
			for _, m := range l.Nodes() {
				if m.Name != n.Name {
					if err := l.waitPeerOf(ctx, n.Name, m.IP.String(), 60*time.Second); err != nil {
						return err
					}
				}
			}
		}
		l.say("calicoctl delete bgppeer %s", rrPeerName)
		if _, err := l.Calicoctl(ctx, l.Nodes()[0].Name, nil, "delete", "bgppeer", rrPeerName); err != nil && !strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "does not exist") {
			return err
		}
	}
	l.setPeering(PeeringMesh)
	if wait {
		_, err := l.WaitSessions(ctx, 60*time.Second)
		return err
	}
	return nil
}

func (l *Lab) setPeering(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.Peering = p
	_ = l.save()
}

// waitPeer waits until every node has an Established session with addr.
func (l *Lab) waitPeer(ctx context.Context, addr fmt.Stringer, timeout time.Duration) error {
	for _, n := range l.Nodes() {
		if err := l.waitPeerOf(ctx, n.Name, addr.String(), timeout); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) waitPeerOf(ctx context.Context, node, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ss, err := l.Sessions(ctx, node)
		if err == nil {
			for _, s := range ss {
				if s.Peer.String() == addr && s.Established() {
					return nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: no Established session with %s after %s (%v %v)", node, addr, timeout, ss, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
