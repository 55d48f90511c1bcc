package bpf

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
)

// TunnelDevice is the node port tunnel's device: VXLAN on TunnelPort
// whose packets carry their destination (the other node) as metadata
// (collect_md), so the programs send to any node through it
// (bpf_skb_set_tunnel_key) and read which node a packet came from.
const TunnelDevice = "pal-nodeport"

// EnsureTunnel makes the node port tunnel's device in ns (when it is
// missing or not as wanted), up, with reverse path filtering off on it
// (its packets come from clients that are not routed by it), and returns
// its interface index.
func EnsureTunnel(ns NetNS) (int, error) {
	if ns == nil {
		ns = currentNS{}
	}
	idx := 0
	err := ns.Do(func() error {
		l, err := netlink.LinkByName(TunnelDevice)
		if err == nil {
			if v, ok := l.(*netlink.Vxlan); !ok || !v.FlowBased || v.Port != TunnelPort {
				if err := netlink.LinkDel(l); err != nil {
					return fmt.Errorf("bpf: removing %s, not the tunnel wanted: %w", TunnelDevice, err)
				}
				l = nil
			}
		} else if _, ok := err.(netlink.LinkNotFoundError); !ok {
			return fmt.Errorf("bpf: looking for %s: %w", TunnelDevice, err)
		} else {
			l = nil
		}
		if l == nil {
			v := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: TunnelDevice}, FlowBased: true, Port: TunnelPort}
			if err := netlink.LinkAdd(v); err != nil {
				return fmt.Errorf("bpf: making the node port tunnel %s: %w", TunnelDevice, err)
			}
			if l, err = netlink.LinkByName(TunnelDevice); err != nil {
				return fmt.Errorf("bpf: reading %s back: %w", TunnelDevice, err)
			}
		}
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+TunnelDevice+"/rp_filter", []byte("0"), 0o644); err != nil {
			return fmt.Errorf("bpf: turning reverse path filtering off on %s: %w", TunnelDevice, err)
		}
		// A flow another node sends here may come from this node's own
		// address (a client of this node's host, or masqueraded to it,
		// reaching that node's node port): the kernel would drop it as
		// a martian. Only nodes may send into the tunnel (pal_tun_in).
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+TunnelDevice+"/accept_local", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("bpf: accepting this node's addresses as sources on %s: %w", TunnelDevice, err)
		}
		if l.Attrs().Flags&1 == 0 { // IFF_UP
			if err := netlink.LinkSetUp(l); err != nil {
				return fmt.Errorf("bpf: setting %s up: %w", TunnelDevice, err)
			}
		}
		idx = l.Attrs().Index
		return nil
	})
	return idx, err
}

// removeTunnel deletes the node port tunnel's device, if any.
func removeTunnel(ns NetNS) error {
	return ns.Do(func() error {
		l, err := netlink.LinkByName(TunnelDevice)
		if err != nil {
			return nil
		}
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("bpf: removing %s: %w", TunnelDevice, err)
		}
		return nil
	})
}
