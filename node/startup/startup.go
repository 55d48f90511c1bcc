package startup

import (
	"context"
	"fmt"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
)

// Result is what startup registered.
type Result struct {
	Node         *v3.Node
	IPv4, IPv6   Address
	CreatedPools []string
}

// Run performs calico-node's startup with cfg (already validated) against
// the datastore behind c, reading the kernel through h and writing the
// forwarding sysctls through s (nil, or cfg.SkipSysctls, skips them).
func Run(ctx context.Context, cfg Config, c *client.Client, h Host, s Sysctl) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	logger := log.WithField("node", cfg.NodeName)
	stored, err := getNode(ctx, c, cfg.NodeName)
	if err != nil {
		return Result{}, err
	}
	var stored4, stored6 string
	if stored != nil && stored.Spec.BGP != nil {
		stored4, stored6 = stored.Spec.BGP.IPv4Address, stored.Spec.BGP.IPv6Address
	}
	v4, err := ResolveAddress(ctx, h, cfg.IP, cfg.IPMethod, false, stored4)
	if err != nil {
		return Result{}, err
	}
	v6, err := ResolveAddress(ctx, h, cfg.IP6, cfg.IP6Method, true, stored6)
	if err != nil {
		return Result{}, err
	}
	if !v4.Prefix.IsValid() && !v6.Prefix.IsValid() && cfg.BGPEnabled() {
		return Result{}, fmt.Errorf("node %q: BGP backend %q needs an IPv4 or IPv6 address, but IP and IP6 are both none", cfg.NodeName, cfg.Backend)
	}
	node, err := writeNode(ctx, c, stored, cfg.NodeName, v4, v6, cfg.AS, cfg.K8sNodeRef)
	if err != nil {
		return Result{}, err
	}
	logger.WithFields(log.Fields{"ipv4": v4.Prefix, "ipv6": v6.Prefix}).Info("Node resource written")
	if err := ensureClusterInfo(ctx, c, cfg.ClusterType); err != nil {
		return Result{}, err
	}
	res := Result{Node: node, IPv4: v4, IPv6: v6}
	if !cfg.NoDefaultPools {
		if res.CreatedPools, err = ensurePools(ctx, c, &cfg); err != nil {
			return res, err
		}
	}
	if s != nil && !cfg.SkipSysctls {
		for _, kv := range forwardingSysctls(true, v6.Prefix.IsValid() || cfg.IPv6Pool.CIDR != "") {
			if err := s.Set(kv[0], kv[1]); err != nil {
				return res, err
			}
		}
	}
	if err := writeNodename(cfg.NodenameFile, cfg.NodeName); err != nil {
		return res, err
	}
	return res, nil
}
