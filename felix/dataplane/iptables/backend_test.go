package iptables

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// plain is the backend the plain iptables command uses.
func plain(t *testing.T) Backend {
	out, err := exec.Command("iptables", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "legacy") {
		return Legacy
	}
	return NFT
}

func TestDetectBackend(t *testing.T) {
	nstest.RequireRoot(t)
	if !Legacy.Available(4) || !NFT.Available(4) {
		t.Skip("needs both iptables backends")
	}
	prefix := nstest.Prefix()
	cases := []struct {
		name       string
		configured string
		setup      []string // a command run in the namespace first
		want       Backend
	}{
		{name: "explicit NFT", configured: "NFT", want: NFT},
		{name: "explicit Legacy", configured: "Legacy", want: Legacy},
		{name: "auto follows legacy rules", configured: "Auto", setup: []string{"iptables-legacy", "-A", "INPUT", "-s", "198.18.0.5", "-j", "ACCEPT"}, want: Legacy},
		{name: "auto follows nft rules", configured: "Auto", setup: []string{"iptables-nft", "-A", "INPUT", "-s", "198.18.0.5", "-j", "ACCEPT"}, want: NFT},
		{name: "auto with no rules follows the iptables command", configured: "", want: plain(t)},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := nstest.New(t, prefix, string(rune('a'+i)))
			if c.setup != nil {
				ns.MustRun(t, c.setup...)
			}
			run, err := nsexec.New(ns.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			got, err := DetectBackend(context.Background(), run, c.configured)
			if err != nil || got != c.want {
				t.Errorf("DetectBackend(%q) = %q, %v; want %q", c.configured, got, err, c.want)
			}
		})
	}
	if _, err := DetectBackend(context.Background(), &nsexec.Runner{}, "Bogus"); err == nil {
		t.Error("iptablesBackend Bogus accepted")
	}
}
