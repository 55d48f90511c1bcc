package lab

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// The kernel keeps one neighbour (ARP) table for all network namespaces,
// and its garbage-collection limit (net.ipv4.neigh.default.gc_thresh3,
// 1024 by default) counts the entries of every namespace together. A
// 50-node mesh alone needs 2,450 node-to-node entries: past the limit new
// ones fail ("arp_cache: neighbor table overflow"), the nodes' SYNs are
// never sent and their sessions stay Active. (A real host runs one node
// and never meets the limit.) So the lab pins each node's fabric
// neighbours, the other nodes, as permanent entries, which the limit does
// not count.

// nodeMAC reads the MAC address of a node's fabric interface.
func nodeMAC(ctx context.Context, n Node) (string, error) {
	out, err := run(ctx, "ip", "-n", n.NS, "-br", "link", "show", "eth0")
	if err != nil {
		return "", err
	}
	f := strings.Fields(out)
	if len(f) < 3 {
		return "", fmt.Errorf("node %s: eth0 has no MAC address: %q", n.Name, out)
	}
	return f[2], nil
}

// pinNeighbors makes every node of targets and every node of all
// permanent neighbours of each other (both directions).
func (l *Lab) pinNeighbors(ctx context.Context, targets, all []Node) error {
	macs := map[string]string{}
	for _, n := range all {
		mac, err := nodeMAC(ctx, n)
		if err != nil {
			return err
		}
		macs[n.Name] = mac
	}
	isTarget := map[string]bool{}
	for _, n := range targets {
		isTarget[n.Name] = true
	}
	for _, n := range all {
		var b strings.Builder
		for _, m := range all {
			if m.Name != n.Name && (isTarget[n.Name] || isTarget[m.Name]) {
				fmt.Fprintf(&b, "neigh replace %s lladdr %s dev eth0 nud permanent\n", m.IP, macs[m.Name])
			}
		}
		if b.Len() == 0 {
			continue
		}
		f := l.path("nodes", n.Name, "neighbors.batch")
		if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
			return err
		}
		if _, err := run(ctx, "ip", "-n", n.NS, "-batch", f); err != nil {
			return fmt.Errorf("node %s: pinning its fabric neighbours: %w", n.Name, err)
		}
	}
	return nil
}
