package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
)

// HaveLoop reports whether the kernel's SchedCLS programs may call
// bpf_loop (Linux 5.17 and later), which the policy engine walks with.
// An error is a probe that could not run.
func HaveLoop() (bool, error) {
	err := features.HaveProgramHelper(ebpf.SchedCLS, asm.FnLoop)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		return false, nil
	}
	return false, fmt.Errorf("bpf: probing for bpf_loop: %w", err)
}

// HaveTCX reports whether the kernel attaches programs with TCX links
// (Linux 6.6 and later; Debian 12's 6.1 has none): a trivial SchedCLS
// program is linked to an interface that does not exist, which a kernel
// with TCX refuses for the interface (ENODEV) and one without it for the
// attach type. An error is a probe that could not run (no program load).
func HaveTCX() (bool, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SchedCLS,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return false, fmt.Errorf("bpf: loading the TCX probe program: %w", err)
	}
	defer prog.Close()
	l, err := link.AttachTCX(link.TCXOptions{Program: prog, Attach: ebpf.AttachTCXIngress, Interface: 0x7fffffff})
	if err == nil {
		l.Close()
		return true, nil
	}
	return !errors.Is(err, ebpf.ErrNotSupported), nil
}
