package bpf

import (
	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
)

// useTCX decides whether attachments may be TCX links: what the kernel
// has (probed once), unless featureDetectOverride names TCX (Calico's
// "TCX=false" forces cls_bpf filters on every interface, data interfaces
// included). The choice is logged when it changes.
func (d *Driver) useTCX(cfg *calc.Config) bool {
	if d.tcx == nil {
		have, err := palbpf.HaveTCX()
		if err != nil {
			d.log.WithError(err).Warn("Could not probe the kernel for TCX: attaching with cls_bpf filters")
		}
		d.tcx = &have
	}
	tcx, how := *d.tcx, "detected"
	if v, ok := cfg.Features["TCX"]; ok {
		tcx, how = v, "featureDetectOverride"
	}
	if d.tcxLogged == nil || *d.tcxLogged != tcx {
		d.tcxLogged = &tcx
		logger := d.log.WithFields(log.Fields{"tcx": tcx, "by": how})
		if tcx {
			logger.Info("Attaching with TCX links (bpfAttachType decides workload and host endpoints)")
		} else {
			logger.Info("No TCX: attaching every program, data interfaces' included, with cls_bpf filters (bpfAttachType TCX is not acted on)")
		}
	}
	return tcx
}

// useEngine decides whether policy stages are laid out for the policy
// engine (decided in place, per-packet cost independent of the rule
// count) or compiled into programs of instructions: the engine needs
// bpf_loop (Linux 5.17; probed once), unless featureDetectOverride names
// BPFLoop. The choice is logged when it changes.
func (d *Driver) useEngine(cfg *calc.Config) bool {
	if d.loop == nil {
		have, err := palbpf.HaveLoop()
		if err != nil {
			d.log.WithError(err).Warn("Could not probe the kernel for bpf_loop: policy compiled into instructions")
		}
		d.loop = &have
	}
	use, how := *d.loop, "detected"
	if v, ok := cfg.Features["BPFLoop"]; ok {
		use, how = v, "featureDetectOverride"
	}
	if d.loopLogged == nil || *d.loopLogged != use {
		d.loopLogged = &use
		logger := d.log.WithFields(log.Fields{"bpfLoop": use, "by": how})
		if use {
			logger.Info("Policy stages are decided by the policy engine")
		} else {
			logger.Info("No bpf_loop: policy stages are compiled into programs of instructions (the per-packet cost grows with the rules)")
		}
	}
	return use
}
