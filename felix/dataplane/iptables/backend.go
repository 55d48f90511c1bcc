// Package iptables keeps one iptables table of one family equal to the
// chains felix/rules renders: it reads the kernel back (iptables-save),
// compares the per-rule hash comments of our chains, and writes only the
// chains that differ, our jump rules in the kernel chains and the removal
// of stale chains, in one `iptables-restore --noflush` per table. Both the
// nft and legacy backends are driven the same way.
package iptables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// Backend is the iptables implementation the kernel rules live in.
type Backend string

// The two backends.
const (
	NFT    Backend = "nft"
	Legacy Backend = "legacy"
)

// Commands returns the save and restore binaries of a backend and family.
func (b Backend) Commands(family int) (save, restore string) {
	base := "iptables"
	if family == 6 {
		base = "ip6tables"
	}
	return base + "-" + string(b) + "-save", base + "-" + string(b) + "-restore"
}

// Available reports whether the backend's binaries for the family exist.
func (b Backend) Available(family int) bool {
	save, restore := b.Commands(family)
	_, e1 := exec.LookPath(save)
	_, e2 := exec.LookPath(restore)
	return e1 == nil && e2 == nil
}

// DetectBackend resolves FelixConfiguration iptablesBackend (Auto, NFT or
// Legacy). Auto picks the backend that already holds rules, as Calico does
// (kube-proxy and the distribution wrote them with the host's iptables):
// legacy when it has more rules than nft, else nft. With no rules anywhere
// it follows what the plain `iptables` command is.
func DetectBackend(ctx context.Context, run *nsexec.Runner, configured string) (Backend, error) {
	switch strings.ToLower(configured) {
	case "nft":
		return NFT, nil
	case "legacy":
		return Legacy, nil
	case "", "auto":
	default:
		return "", fmt.Errorf("iptablesBackend %q: want Auto, NFT or Legacy", configured)
	}
	count := func(b Backend) int {
		if !b.Available(4) {
			return -1
		}
		save, _ := b.Commands(4)
		out, err := run.Run(ctx, "", save)
		if err != nil {
			return -1
		}
		return bytes.Count(out, []byte("\n-A "))
	}
	nft, legacy := count(NFT), count(Legacy)
	switch {
	case legacy > nft:
		return Legacy, nil
	case nft > 0 || legacy < 0:
		return NFT, nil
	}
	out, err := exec.CommandContext(ctx, "iptables", "--version").Output()
	if err == nil && strings.Contains(string(out), "legacy") {
		return Legacy, nil
	}
	return NFT, nil
}
