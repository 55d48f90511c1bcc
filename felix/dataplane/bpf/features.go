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
