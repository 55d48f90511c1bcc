package commands

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// checkResult is one line of `calicoctl node checksystem`.
type checkResult struct {
	name string
	// verdict is OK, FAIL (required and missing) or WARN (optional and
	// missing, or a setting calico-node fixes itself).
	verdict string
	detail  string
}

func newNodeCheckSystemCommand(a *app, _ *nodeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "checksystem",
		Short: "Check this host's kernel for what calico-node needs",
		Long: `Check the kernel version, the link types calico-node creates (veth, vxlan;
ipip and wireguard reported when missing), the iptables backends (nft,
legacy), ipset, IP forwarding and whether bpffs is mounted. Link types and
ipset are tried in a throw-away network namespace, never on the host's own.
Each line says OK, WARN (optional, or set by calico-node) or FAIL (required);
the exit code is 1 when any line FAILs. Needs root.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			results := runSystemChecks()
			tw := tabwriter.NewWriter(a.env.Out, 0, 8, 2, ' ', 0)
			failed := 0
			for _, r := range results {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", r.name, r.verdict, r.detail)
				if r.verdict == "FAIL" {
					failed++
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("System doesn't meet one or more minimum requirements to run Calico (%d failed)", failed)
			}
			fmt.Fprintln(a.env.Out, "System meets minimum system requirements to run Calico!")
			return nil
		},
	}
}

func runSystemChecks() []checkResult {
	var out []checkResult
	out = append(out, checkKernelVersion())
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "calicoctl-check-" + hex.EncodeToString(b)
	if err := exec.Command("ip", "netns", "add", ns).Run(); err != nil {
		return append(out, checkResult{"network namespace", "FAIL", "cannot create a scratch namespace (root needed): " + err.Error()})
	}
	defer func() { _ = exec.Command("ip", "netns", "del", ns).Run() }()
	for _, l := range []struct {
		kind     string
		args     []string
		required bool
	}{
		{"veth", []string{"type", "veth", "peer", "name", "chk-peer"}, true},
		{"vxlan", []string{"type", "vxlan", "id", "4096", "dstport", "4789"}, false},
		{"ipip", []string{"type", "ipip"}, false},
		{"wireguard", []string{"type", "wireguard"}, false},
	} {
		args := append([]string{"-n", ns, "link", "add", "chk-" + l.kind}, l.args...)
		msg, err := exec.Command("ip", args...).CombinedOutput()
		r := checkResult{name: "link type " + l.kind, verdict: "OK", detail: "can be created"}
		if err != nil {
			r.verdict, r.detail = "WARN", "not available: "+strings.TrimSpace(string(msg))
			if l.required {
				r.verdict = "FAIL"
			}
		}
		out = append(out, r)
	}
	backends := 0
	for _, be := range []string{"nft", "legacy"} {
		r := checkResult{name: "iptables " + be, verdict: "OK"}
		msg, err := exec.Command("ip", "netns", "exec", ns, "iptables-"+be+"-save").CombinedOutput()
		if err != nil {
			r.verdict, r.detail = "WARN", "not usable: "+firstLine(string(msg), err)
		} else {
			backends++
			r.detail = "iptables-" + be + "-save works"
		}
		out = append(out, r)
	}
	if backends == 0 {
		out = append(out, checkResult{"iptables", "FAIL", "no iptables backend (nft or legacy) works"})
	}
	r := checkResult{name: "ipset", verdict: "OK", detail: "hash:net sets can be created"}
	if msg, err := exec.Command("ip", "netns", "exec", ns, "ipset", "create", "chk", "hash:net").CombinedOutput(); err != nil {
		r.verdict, r.detail = "FAIL", firstLine(string(msg), err)
	}
	out = append(out, r)
	out = append(out, checkSysctl("net.ipv4.ip_forward"), checkSysctl("net.ipv6.conf.all.forwarding"), checkBPFFS())
	return out
}

func checkKernelVersion() checkResult {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return checkResult{"kernel version", "FAIL", err.Error()}
	}
	rel := unix.ByteSliceToString(u.Release[:])
	parts := strings.SplitN(rel, ".", 3)
	major, _ := strconv.Atoi(parts[0])
	minor := 0
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	}
	if major > 3 || major == 3 && minor >= 10 {
		return checkResult{"kernel version", "OK", rel}
	}
	return checkResult{"kernel version", "FAIL", rel + " (3.10 or newer needed)"}
}

func checkSysctl(name string) checkResult {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return checkResult{name, "WARN", err.Error()}
	}
	v := strings.TrimSpace(string(b))
	if v == "1" {
		return checkResult{name, "OK", "1"}
	}
	return checkResult{name, "WARN", v + " (calico-node sets it to 1)"}
}

func checkBPFFS() checkResult {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return checkResult{"bpffs", "WARN", err.Error()}
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == "bpf" {
			return checkResult{"bpffs", "OK", "mounted at " + f[1]}
		}
	}
	return checkResult{"bpffs", "WARN", "not mounted (the eBPF dataplane mounts it at /sys/fs/bpf)"}
}

func firstLine(s string, err error) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return err.Error()
	}
	return s
}
