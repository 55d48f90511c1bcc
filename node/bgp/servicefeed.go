package bgp

import (
	"context"
	"fmt"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/k8s/listwatch"
	"github.com/palisade-net/palisade/node/bgp/paths"
	"github.com/palisade-net/palisade/node/bgp/services"
)

// serviceFeed runs the Kubernetes Service watch only while
// BGPConfiguration names service CIDRs.
type serviceFeed struct {
	ctx     context.Context
	node    string
	connect func() (*listwatch.Client, error)
	log     *log.Entry
	poke    func()
	w       *services.Watcher
}

// namesServiceCIDRs says whether c asks for service advertisement.
func namesServiceCIDRs(c *v3.BGPConfigurationSpec) bool {
	return c != nil && len(c.ServiceClusterIPs)+len(c.ServiceExternalIPs)+len(c.ServiceLoadBalancerIPs) > 0
}

// services returns the Services for conf: none (and the watch stopped)
// when conf names no service CIDRs; none until the caches have synced;
// and a note when the Kubernetes API cannot be reached, in which case
// only the CIDRs are advertised.
func (f *serviceFeed) services(conf *v3.BGPConfigurationSpec) ([]paths.Service, string) {
	if !namesServiceCIDRs(conf) {
		f.stop()
		return nil, ""
	}
	if f.w == nil {
		client, err := f.connect()
		if err != nil {
			return nil, fmt.Sprintf("service addresses (/32, /128) are not advertised, only the service CIDRs: Kubernetes API: %v", err)
		}
		f.log.Info("Watching Kubernetes Services and EndpointSlices for service advertisement")
		f.w = services.Start(f.ctx, client, f.node, f.log, f.poke)
	}
	if !f.w.Synced() {
		return nil, ""
	}
	return f.w.Services(), ""
}

func (f *serviceFeed) stop() {
	if f.w != nil {
		f.w.Stop()
		f.w = nil
		f.log.Info("Stopped watching Kubernetes Services: no service CIDRs configured")
	}
}
