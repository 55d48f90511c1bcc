package lab

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// NodeStatus is `calicoctl node status` run on the node.
func (l *Lab) NodeStatus(ctx context.Context, node string) (string, error) {
	return l.Calicoctl(ctx, node, nil, "node", "status")
}

// Routes is the node's IPv4 routing table (`ip route show`).
func (l *Lab) Routes(ctx context.Context, target string) (string, error) {
	ns, err := l.Target(target)
	if err != nil {
		return "", err
	}
	return run(ctx, "ip", "-n", ns, "-4", "route", "show")
}

// Status prints the lab: each node's `calicoctl node status`, its GoBGP
// sessions and routes, the route reflector's and border router's
// protocols, and the pods.
func (l *Lab) Status(ctx context.Context, w io.Writer) error {
	o := l.st.Options
	fmt.Fprintf(w, "lab %s: %d node(s), %s topology, route reflector %s, etcd %s (%s), border %v\n",
		l.st.Name, len(l.Nodes()), l.Peering(), o.RR, o.Etcd, strings.Join(l.etcdEndpoints(), ","), o.Border)
	fmt.Fprintf(w, "state %s, namespaces %s*\n", l.dir, l.st.Prefix)
	for _, n := range l.Nodes() {
		fmt.Fprintf(w, "\n=== %s (%s, namespace %s) ===\n", n.Name, n.IP, n.NS)
		fmt.Fprintf(w, "$ calicoctl node status\n")
		out, err := l.NodeStatus(ctx, n.Name)
		fmt.Fprint(w, indent(out))
		if err != nil && out == "" {
			fmt.Fprintf(w, "  (%v)\n", err)
		}
		if strings.Contains(out, "not available") || strings.Contains(out, "not running") {
			if ss, err := l.Sessions(ctx, n.Name); err == nil {
				fmt.Fprintf(w, "GoBGP sessions (gRPC %s in the node):\n", grpcAddr)
				for _, s := range ss {
					fmt.Fprintf(w, "  %-15s AS %-6d %s\n", s.Peer, s.AS, s.State)
				}
			}
		}
		fmt.Fprintf(w, "$ ip route\n")
		routes, err := l.Routes(ctx, n.Name)
		if err != nil {
			fmt.Fprintf(w, "  (%v)\n", err)
		}
		fmt.Fprint(w, indent(routes))
		fmt.Fprint(w, l.kubeProxyStatus(ctx, n))
	}
	for _, role := range []string{"rr", "border"} {
		if _, ok := l.Proc("bird/" + role); !ok {
			continue
		}
		fmt.Fprintf(w, "\n=== %s (BIRD, namespace %s%s) ===\n$ birdc show protocols\n", role, l.st.Prefix, role)
		out, err := l.Bird(ctx, role, "show", "protocols")
		if err != nil {
			fmt.Fprintf(w, "  (%v)\n", err)
		}
		fmt.Fprint(w, indent(out))
	}
	pods := l.Pods()
	fmt.Fprintf(w, "\n=== pods (%d) ===\n", len(pods))
	for _, p := range pods {
		fmt.Fprintf(w, "  %-30s %-8s %-15s %s\n", p.Key(), p.Node, p.IP, p.NS)
	}
	return nil
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return "  " + strings.Join(lines, "\n  ") + "\n"
}
