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
	return d.feature(cfg, kernelFeature{name: "TCX", field: "tcx", probe: palbpf.HaveTCX, have: &d.tcx, logged: &d.tcxLogged,
		probeFailed: "Could not probe the kernel for TCX: attaching with cls_bpf filters",
		on:          "Attaching with TCX links (bpfAttachType decides workload and host endpoints)",
		off:         "No TCX: attaching every program, data interfaces' included, with cls_bpf filters (bpfAttachType TCX is not acted on)"})
}

// useEngine decides whether policy stages are laid out for the policy
// engine (decided in place, per-packet cost independent of the rule
// count) or compiled into programs of instructions: the engine needs
// bpf_loop (Linux 5.17; probed once), unless featureDetectOverride names
// BPFLoop. The choice is logged when it changes.
func (d *Driver) useEngine(cfg *calc.Config) bool {
	return d.feature(cfg, kernelFeature{name: "BPFLoop", field: "bpfLoop", probe: palbpf.HaveLoop, have: &d.loop, logged: &d.loopLogged,
		probeFailed: "Could not probe the kernel for bpf_loop: policy compiled into instructions",
		on:          "Policy stages are decided by the policy engine",
		off:         "No bpf_loop: policy stages are compiled into programs of instructions (the per-packet cost grows with the rules)"})
}

// kernelFeature is a feature of the kernel felix probes once and
// featureDetectOverride may force: its name there, its log field, the
// probe, where the probe's answer and the choice last logged are kept,
// and the log lines.
type kernelFeature struct {
	name, field          string
	probe                func() (bool, error)
	have, logged         **bool
	probeFailed, on, off string
}

func (d *Driver) feature(cfg *calc.Config, f kernelFeature) bool {
	if *f.have == nil {
		have, err := f.probe()
		if err != nil {
			d.log.WithError(err).Warn(f.probeFailed)
		}
		*f.have = &have
	}
	use, how := **f.have, "detected"
	if v, ok := cfg.Features[f.name]; ok {
		use, how = v, "featureDetectOverride"
	}
	if *f.logged == nil || **f.logged != use {
		*f.logged = &use
		logger := d.log.WithFields(log.Fields{f.field: use, "by": how})
		if use {
			logger.Info(f.on)
		} else {
			logger.Info(f.off)
		}
	}
	return use
}

// NeedsRestart reports whether the programs loaded lack the policy
// engine that the BPFLoop feature now asks for (featureDetectOverride
// no longer says BPFLoop=false): the object is chosen when the dataplane
// starts, so it must start again. The other way needs nothing: the
// object with the engine runs compiled stages too.
func (d *Driver) NeedsRestart() bool {
	return d.ready && d.objs != nil && !d.objs.Engine && d.cfg != nil && d.useEngine(d.cfg)
}
