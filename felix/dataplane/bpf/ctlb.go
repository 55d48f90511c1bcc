package bpf

import (
	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// ctlbWant is what the connect-time load balancer should be: the
// programs on the root of the cgroup v2 hierarchy (or not), and whether
// they translate UDP sockets too.
type ctlbWant struct {
	on, udp bool
	// cgroupV2Path is FelixConfiguration cgroupV2Path ("" finds the
	// hierarchy: palbpf.CgroupRoot).
	cgroupV2Path string
	// warn names what Palisade cannot do of the configuration ("" none).
	warn string
}

// ctlbWanted reads FelixConfiguration bpfConnectTimeLoadBalancing (TCP
// by default, as in Calico), bpfHostNetworkedNATWithoutCTLB (Enabled by
// default) and the deprecated bpfConnectTimeLoadBalancingEnabled (true:
// Enabled and Disabled, false: Disabled and Disabled, as Calico's
// defaulting turns it into the two). Calico NATs what its connect-time
// programs leave (UDP with TCP, everything with Disabled) per packet at
// the host's interfaces when host-networked NAT is Enabled; Palisade has
// no such path, so with TCP it translates UDP sockets at connect time
// too, and with Disabled host-networked processes reach Services only
// through kube-proxy (docs/bpf.md).
func ctlbWanted(cfg *calc.Config) ctlbWant {
	s := &cfg.Spec
	mode, nat := "TCP", "Enabled"
	if e := s.BPFConnectTimeLoadBalancingEnabled; e != nil {
		mode, nat = "Disabled", "Disabled"
		if *e {
			mode = "Enabled"
		}
	}
	if s.BPFConnectTimeLoadBalancing != nil {
		mode = *s.BPFConnectTimeLoadBalancing
	}
	if s.BPFHostNetworkedNATWithoutCTLB != nil {
		nat = *s.BPFHostNetworkedNATWithoutCTLB
	}
	w := ctlbWant{cgroupV2Path: s.CgroupV2Path}
	switch mode {
	case "Enabled":
		w.on, w.udp = true, true
	case "Disabled":
		w.warn = "bpfConnectTimeLoadBalancing Disabled: host-networked processes reach Services only through kube-proxy (Palisade has no per-packet NAT of host traffic)"
	default: // TCP
		w.on, w.udp = true, nat == "Enabled"
	}
	return w
}

// ctlbState is the connect-time load balancer as last applied.
type ctlbState struct {
	applied *ctlbWant
	// cgroup is the directory the programs were attached to.
	cgroup string
}

// applyCTLB attaches, updates or detaches the connect-time programs when
// what is wanted changed, at start (a restarted felix updates the pinned
// links in place) and when the periodic read back found a link missing
// (checkCTLB). A failure is logged and not retried before one of those:
// a kernel without a hook keeps the rest of the dataplane.
func (d *Driver) applyCTLB() {
	w := ctlbWanted(d.cfg)
	if a := d.ctlb.applied; a != nil && *a == w {
		return
	}
	d.ctlb.applied = &w
	if w.warn != "" {
		d.log.Warn(w.warn)
	}
	if !w.on {
		if err := d.objs.DetachCTLB(); err != nil {
			d.log.WithError(err).Warn("Connect-time load balancer not detached")
		}
		return
	}
	root, err := palbpf.CgroupRoot(w.cgroupV2Path, "/proc/self/mountinfo")
	if err == nil {
		err = d.objs.AttachCTLB(palbpf.CTLBOptions{Cgroup: root, UDP: w.udp})
	}
	if err != nil {
		d.log.WithError(err).Warn("Connect-time load balancer not attached: host-networked processes reach Services only through kube-proxy")
		return
	}
	d.ctlb.cgroup = root
	d.log.WithFields(log.Fields{"cgroup": root, "udp": w.udp}).Info("Connect-time load balancer attached (host-networked processes reach Services)")
}

// checkCTLB makes the next applyCTLB attach again when a link of the
// connect-time programs went (removed by hand).
func (d *Driver) checkCTLB() {
	if a := d.ctlb.applied; a != nil && a.on && len(d.objs.CTLBAttached()) < palbpf.CTLBHooks {
		d.ctlb.applied = nil
	}
}
