package kubepod

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
)

// Placeholders of host-local's subnet that Calico replaces with the
// node's pod CIDR.
const (
	UsePodCIDR     = "usePodCidr"
	UsePodCIDRIPv6 = "usePodCidrIPv6"
)

// UsesPodCIDR says whether the ipam section of the network configuration
// asks for the node's pod CIDR (as its subnet, or a range's).
func UsesPodCIDR(stdin []byte) bool {
	var conf struct {
		IPAM struct {
			Subnet string              `json:"subnet"`
			Ranges [][]json.RawMessage `json:"ranges"`
		} `json:"ipam"`
	}
	if json.Unmarshal(stdin, &conf) != nil {
		return false
	}
	if conf.IPAM.Subnet == UsePodCIDR || conf.IPAM.Subnet == UsePodCIDRIPv6 {
		return true
	}
	for _, set := range conf.IPAM.Ranges {
		for _, r := range set {
			var rr struct {
				Subnet string `json:"subnet"`
			}
			if json.Unmarshal(r, &rr) == nil && (rr.Subnet == UsePodCIDR || rr.Subnet == UsePodCIDRIPv6) {
				return true
			}
		}
	}
	return false
}

// PodCIDRConfig returns the network configuration with usePodCidr (and
// usePodCidrIPv6) replaced by the node's spec.podCIDRs (spec.podCIDR when
// that is all it has), for the IPAM plugin to run with.
func (m *Mode) PodCIDRConfig(ctx context.Context, stdin []byte) ([]byte, error) {
	if !UsesPodCIDR(stdin) {
		return stdin, nil
	}
	if m == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("ipam subnet %q needs the node's pod CIDR from the Kubernetes API: "+
			"set kubernetes.kubeconfig (and run the plugin for a pod)", UsePodCIDR), "")
	}
	node, err := m.client.Node(ctx, m.NodeName())
	if err != nil {
		return nil, err
	}
	var v4, v6 string
	cidrs := node.Spec.PodCIDRs
	if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
		cidrs = []string{node.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("node %s: spec.podCIDR %q is not a CIDR", node.Name, c), "")
		}
		if p.Addr().Is4() && v4 == "" {
			v4 = p.String()
		} else if p.Addr().Is6() && v6 == "" {
			v6 = p.String()
		}
	}
	var conf map[string]any
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("network configuration: %v", err), "")
	}
	ipam, _ := conf["ipam"].(map[string]any)
	replace := func(v any) (any, error) {
		switch v {
		case UsePodCIDR:
			if v4 == "" {
				return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("ipam subnet %q: node %s has no IPv4 spec.podCIDR", UsePodCIDR, node.Name), "")
			}
			return v4, nil
		case UsePodCIDRIPv6:
			if v6 == "" {
				return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("ipam subnet %q: node %s has no IPv6 spec.podCIDR", UsePodCIDRIPv6, node.Name), "")
			}
			return v6, nil
		}
		return v, nil
	}
	if s, ok := ipam["subnet"]; ok {
		if ipam["subnet"], err = replace(s); err != nil {
			return nil, err
		}
	}
	if ranges, ok := ipam["ranges"].([]any); ok {
		for _, set := range ranges {
			rs, _ := set.([]any)
			for _, r := range rs {
				if rm, ok := r.(map[string]any); ok {
					if s, ok := rm["subnet"]; ok {
						if rm["subnet"], err = replace(s); err != nil {
							return nil, err
						}
					}
				}
			}
		}
	}
	return json.Marshal(conf)
}
