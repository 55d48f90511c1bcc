package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// grpcPort is where calico-node serves GoBGP's API inside each node.
const grpcAddr = "127.0.0.1:50051"

// Session is one BGP session of a node, as its GoBGP reports it.
type Session struct {
	Node  string
	Peer  netip.Addr
	AS    uint32
	State string // "ESTABLISHED", "ACTIVE", …
}

// Established says whether the session is up.
func (s Session) Established() bool { return s.State == api.PeerState_ESTABLISHED.String() }

// Sessions lists a node's BGP sessions through GoBGP's gRPC API, dialled
// from inside the node's namespace.
func (l *Lab) Sessions(ctx context.Context, node string) ([]Session, error) {
	n, ok := l.Node(node)
	if !ok {
		return nil, fmt.Errorf("lab %s: no node %q", l.st.Name, node)
	}
	conn, err := grpc.NewClient("passthrough:///"+grpcAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var c net.Conn
			err := inNS(n.NS, func() (err error) {
				c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				return err
			})
			return c, err
		}))
	if err != nil {
		return nil, fmt.Errorf("node %s: GoBGP API: %w", node, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stream, err := api.NewGobgpApiClient(conn).ListPeer(ctx, &api.ListPeerRequest{})
	if err != nil {
		return nil, fmt.Errorf("node %s: listing BGP peers: %w", node, err)
	}
	var out []Session
	for {
		r, err := stream.Recv()
		if err != nil {
			if strings.Contains(err.Error(), "EOF") {
				break
			}
			return nil, fmt.Errorf("node %s: listing BGP peers: %w", node, err)
		}
		p := r.GetPeer()
		addr, _ := netip.ParseAddr(p.GetConf().GetNeighborAddress())
		out = append(out, Session{Node: node, Peer: addr, AS: p.GetConf().GetPeerAsn(), State: p.GetState().GetSessionState().String()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer.Less(out[j].Peer) })
	return out, nil
}

// expectedPeers is the set of peers a node should have in the current
// topology.
func (l *Lab) expectedPeers(node string) map[netip.Addr]string {
	want := map[netip.Addr]string{}
	switch l.Peering() {
	case PeeringRR:
		want[rrAddr] = "route reflector"
	case PeeringNodeRR:
		nodes := l.Nodes()
		rrs := nodeRRs(nodes)
		isRR := map[string]bool{}
		for _, r := range rrs {
			isRR[r.Name] = true
		}
		for _, n := range nodes {
			switch {
			case n.Name == node:
			case isRR[n.Name]:
				want[n.IP] = n.Name + " (route reflector)"
			case isRR[node]:
				want[n.IP] = n.Name + " (client)"
			}
		}
	default:
		for _, n := range l.Nodes() {
			if n.Name != node {
				want[n.IP] = n.Name
			}
		}
	}
	if l.st.Options.Border {
		want[borderAddr] = "border router"
	}
	return want
}

// WaitSessions waits until every node has exactly the sessions the
// topology asks for, all Established, printing each as it comes up. It
// returns how long that took.
func (l *Lab) WaitSessions(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	if !l.st.Options.bgp() {
		return 0, nil // backend vxlan: no BGP, no sessions
	}
	began := time.Now()
	deadline := began.Add(timeout)
	seen := map[string]bool{}
	for {
		var (
			mu      sync.Mutex
			missing []string
			wg      sync.WaitGroup
		)
		for _, n := range l.Nodes() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ss, err := l.Sessions(ctx, n.Name)
				want := l.expectedPeers(n.Name)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					missing = append(missing, err.Error())
					return
				}
				got := map[netip.Addr]bool{}
				for _, s := range ss {
					what, ok := want[s.Peer]
					if !ok {
						missing = append(missing, fmt.Sprintf("%s still has a session with %s (%s)", n.Name, s.Peer, s.State))
						continue
					}
					if !s.Established() {
						missing = append(missing, fmt.Sprintf("%s ↔ %s (%s) is %s", n.Name, s.Peer, what, s.State))
						continue
					}
					got[s.Peer] = true
					key := n.Name + " " + s.Peer.String()
					if !seen[key] {
						seen[key] = true
						l.say("  BGP %s ↔ %s (%s, AS %d) Established (%s)", n.Name, s.Peer, what, s.AS, time.Since(began).Round(10*time.Millisecond))
					}
				}
				for addr, what := range want {
					if !got[addr] && !hasPeer(ss, addr) {
						missing = append(missing, fmt.Sprintf("%s has no session with %s (%s)", n.Name, addr, what))
					}
				}
			}()
		}
		wg.Wait()
		if len(missing) == 0 {
			d := time.Since(began)
			l.say("✓ all BGP sessions Established (%s topology, %s)", l.Peering(), d.Round(10*time.Millisecond))
			return d, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			sort.Strings(missing)
			return time.Since(began), fmt.Errorf("BGP sessions not established after %s:\n  %s", timeout, strings.Join(missing, "\n  "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func hasPeer(ss []Session, a netip.Addr) bool {
	for _, s := range ss {
		if s.Peer == a {
			return true
		}
	}
	return false
}
