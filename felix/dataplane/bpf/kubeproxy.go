package bpf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/iptables"
)

// kubeProxyCleanup is FelixConfiguration bpfKubeProxyIptablesCleanupEnabled,
// true unless set false (Calico's default): the eBPF dataplane
// load-balances Services, so kube-proxy's iptables rules are removed.
func kubeProxyCleanup(cfg *calc.Config) bool {
	return cfg.Spec.BPFKubeProxyIptablesCleanupEnabled == nil || *cfg.Spec.BPFKubeProxyIptablesCleanupEnabled
}

// kubeProxyRestore is the iptables-restore input that removes kube-proxy's
// rules from one iptables-save output: its chains (KUBE-*) flushed and
// deleted, and the rules of other chains that jump to them deleted. Empty
// when there are none.
func kubeProxyRestore(save []byte) string {
	var b strings.Builder
	table := ""
	var chains, dels []string
	flush := func() {
		if table == "" || len(chains)+len(dels) == 0 {
			return
		}
		fmt.Fprintf(&b, "*%s\n", table)
		for _, d := range dels {
			b.WriteString(d + "\n")
		}
		for _, c := range chains {
			fmt.Fprintf(&b, "-F %s\n", c)
		}
		for _, c := range chains {
			fmt.Fprintf(&b, "-X %s\n", c)
		}
		b.WriteString("COMMIT\n")
	}
	for _, raw := range bytes.Split(save, []byte("\n")) {
		line := string(bytes.TrimSpace(raw))
		switch {
		case strings.HasPrefix(line, "*"):
			table, chains, dels = line[1:], nil, nil
		case strings.HasPrefix(line, ":KUBE-"):
			chains = append(chains, strings.Fields(line[1:])[0])
		case strings.HasPrefix(line, "-A "):
			f := strings.Fields(line)
			if len(f) < 2 || strings.HasPrefix(f[1], "KUBE-") {
				continue
			}
			if strings.Contains(line, " -j KUBE-") || strings.Contains(line, " -g KUBE-") {
				dels = append(dels, "-D"+line[2:])
			}
		case line == "COMMIT":
			flush()
			table = ""
		}
	}
	return b.String()
}

// cleanKubeProxy removes kube-proxy's iptables rules of both backends and
// families felix runs.
func (d *Driver) cleanKubeProxy(ctx context.Context) error {
	var errs []error
	for _, v := range d.families {
		for _, be := range []iptables.Backend{iptables.NFT, iptables.Legacy} {
			if !be.Available(v) {
				continue
			}
			save, restore := be.Commands(v)
			out, err := d.run.Run(ctx, "", save)
			if err != nil {
				errs = append(errs, fmt.Errorf("reading kube-proxy's rules (%s, IPv%d): %w", save, v, err))
				continue
			}
			in := kubeProxyRestore(out)
			if in == "" {
				continue
			}
			if _, err := d.run.Run(ctx, in, restore, "--noflush"); err != nil {
				errs = append(errs, fmt.Errorf("removing kube-proxy's rules (%s, IPv%d): %w", restore, v, err))
				continue
			}
			d.log.WithFields(log.Fields{"backend": string(be), "ipVersion": v}).Info("Removed kube-proxy's iptables rules: the eBPF dataplane load-balances Services (bpfKubeProxyIptablesCleanupEnabled)")
		}
	}
	return errors.Join(errs...)
}
