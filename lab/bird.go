package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Debian's BIRD 2.
const (
	bird2Bin = "/usr/sbin/bird"
	bird2Ctl = "/usr/sbin/birdc"
)

// birdBinaries returns the daemon and client of a BIRD kind.
func (l *Lab) birdBinaries(kind string) (string, string, error) {
	if kind != RRBird1 {
		if _, err := os.Stat(bird2Bin); err != nil {
			return "", "", fmt.Errorf("BIRD 2 is not installed at %s (make deps installs Debian's bird2)", bird2Bin)
		}
		return bird2Bin, bird2Ctl, nil
	}
	dir := l.st.Options.Bird1
	if dir == "" {
		dir = findBird1(l.st.Options.BinDir)
	}
	if dir == "" {
		return "", "", fmt.Errorf("BIRD 1.6 not found in .tools/bird1/usr/sbin (make deps unpacks it)")
	}
	return filepath.Join(dir, "bird"), filepath.Join(dir, "birdc"), nil
}

// findBird1 looks for .tools/bird1/usr/sbin upward from the working
// directory and from dirs.
func findBird1(dirs ...string) string {
	wd, _ := os.Getwd()
	for _, start := range append([]string{wd}, dirs...) {
		for d := start; d != "" && d != "/"; d = filepath.Dir(d) {
			cand := filepath.Join(d, ".tools", "bird1", "usr", "sbin")
			if _, err := os.Stat(filepath.Join(cand, "bird")); err == nil {
				return cand
			}
		}
	}
	return ""
}

// birdKind is the BIRD a role runs (the border is always BIRD 2).
func (l *Lab) birdKind(role string) string {
	if role == "rr" {
		return l.st.Options.RR
	}
	return RRBird2
}

// birdSocket is the control socket of a role's BIRD.
func (l *Lab) birdSocket(role string) string { return l.path(role, "bird.ctl") }

// birdSymbol makes a BIRD protocol name out of a node name.
func birdSymbol(name string) string {
	return strings.NewReplacer("-", "_", ".", "_").Replace(name)
}

// rrConfig renders the route reflector's configuration: every node an
// rr client, graceful restart on, next hops on the shared subnet.
func rrConfig(kind string, nodes []Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Palisade lab route reflector (%s), written by the lab.\n", kind)
	fmt.Fprintf(&b, "log stderr { info, remote, warning, error, auth, fatal, bug };\nrouter id %s;\n", rrAddr)
	b.WriteString("protocol device { scan time 2; }\n")
	b.WriteString("template bgp nodes {\n")
	fmt.Fprintf(&b, "  local %s as %d;\n  direct;\n  rr client;\n  rr cluster id %s;\n  graceful restart;\n  connect retry time 2;\n", rrAddr, ClusterAS, rrAddr)
	if kind == RRBird1 {
		b.WriteString("  import all;\n  export all;\n")
	} else {
		b.WriteString("  ipv4 { import all; export all; };\n")
	}
	b.WriteString("}\n")
	for _, n := range nodes {
		fmt.Fprintf(&b, "protocol bgp %s from nodes {\n  description \"%s\";\n  neighbor %s as %d;\n}\n", birdSymbol(n.Name), n.IP, n.IP, ClusterAS)
	}
	return b.String()
}

// borderPrefix is the "outside" network the border router announces.
var borderPrefix = netip.MustParsePrefix("198.19.0.0/24")

// BorderPrefix is the network the border router announces to the nodes.
func BorderPrefix() netip.Prefix { return borderPrefix }

// borderConfig renders the border router: AS 65001, eBGP with every node,
// announcing 198.19.0.0/24 and installing the pod routes it learns.
func borderConfig(nodes []Node) string {
	var b strings.Builder
	b.WriteString("# Palisade lab border router, written by the lab.\n")
	fmt.Fprintf(&b, "log stderr { info, remote, warning, error, auth, fatal, bug };\nrouter id %s;\n", borderAddr)
	b.WriteString("protocol device { scan time 2; }\n")
	fmt.Fprintf(&b, "protocol static { ipv4; route %s blackhole; }\n", borderPrefix)
	b.WriteString("protocol kernel { ipv4 { import none; export where source = RTS_BGP; }; }\n")
	b.WriteString("template bgp nodes {\n")
	fmt.Fprintf(&b, "  local %s as %d;\n  graceful restart;\n  connect retry time 2;\n", borderAddr, BorderAS)
	b.WriteString("  ipv4 { import all; export where source = RTS_STATIC; };\n}\n")
	for _, n := range nodes {
		fmt.Fprintf(&b, "protocol bgp %s from nodes {\n  description \"%s\";\n  neighbor %s as %d;\n}\n", birdSymbol(n.Name), n.IP, n.IP, ClusterAS)
	}
	return b.String()
}

// writeBirdConfig writes a role's configuration for the current nodes.
func (l *Lab) writeBirdConfig(role string) (string, error) {
	conf := borderConfig(l.Nodes())
	if role == "rr" {
		conf = rrConfig(l.st.Options.RR, l.Nodes())
	}
	path := l.path(role, "bird.conf")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

// startBird creates the role's namespace and runs BIRD in it.
func (l *Lab) startBird(ctx context.Context, role string) error {
	kind := l.birdKind(role)
	bin, _, err := l.birdBinaries(kind)
	if err != nil {
		return err
	}
	addr, what := rrAddr, "route reflector"
	if role == "border" {
		addr, what = borderAddr, fmt.Sprintf("border router (AS %d)", BorderAS)
	}
	l.say("creating %s: namespace %s%s, %s/24, %s", what, l.st.Prefix, role, addr, kind)
	ns, err := l.attachNS(ctx, role, role, addr)
	if err != nil {
		return err
	}
	conf, err := l.writeBirdConfig(role)
	if err != nil {
		return err
	}
	argv := []string{bin, "-f", "-c", conf, "-s", l.birdSocket(role)}
	p, err := start(ns, "bird/"+role, l.path(role, "bird.log"), argv, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		return err
	}
	if err := l.recordProc("bird/"+role, p); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := l.Bird(ctx, role, "show", "status"); err == nil {
			return nil
		}
		if !p.Alive() || time.Now().After(deadline) {
			return fmt.Errorf("BIRD (%s) did not start:\n%s", role, tail(p.Log, 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Bird runs a birdc command against a role's BIRD ("rr" or "border").
func (l *Lab) Bird(ctx context.Context, role string, args ...string) (string, error) {
	_, ctl, err := l.birdBinaries(l.birdKind(role))
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, ctl, append([]string{"-s", l.birdSocket(role)}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("birdc %s (%s): %w: %s", strings.Join(args, " "), role, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// reconfigureBirds rewrites the BIRD configurations for the current nodes
// and has the running daemons reload them.
func (l *Lab) reconfigureBirds(ctx context.Context) error {
	for _, role := range []string{"rr", "border"} {
		if _, ok := l.Proc("bird/" + role); !ok {
			continue
		}
		if _, err := l.writeBirdConfig(role); err != nil {
			return err
		}
		out, err := l.Bird(ctx, role, "configure")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Reconfigured") && !strings.Contains(out, "Reconfiguration in progress") {
			return fmt.Errorf("BIRD (%s) refused its new configuration: %s", role, out)
		}
	}
	return nil
}
