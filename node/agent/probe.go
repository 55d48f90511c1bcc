package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/palisade-net/palisade/felix"
	"github.com/palisade-net/palisade/node/status"
)

// probeTimeout bounds one probe run (Calico's manifest gives its exec
// probes 10 s).
const probeTimeout = 5 * time.Second

// probeFlags are Calico's calico-node probe flags, for exec probes:
// felix's health endpoint, and the BGP part ("bird" is the embedded GoBGP;
// bird6 its IPv6 sessions).
var probeFlags = map[string]bool{
	"felix-live": true, "felix-ready": true,
	"bird-live": true, "bird-ready": true, "bird6-live": true, "bird6-ready": true,
}

// Probe runs calico-node's probe flags when args are nothing but them
// (with one dash, as Calico's, or two): it prints one line saying what is
// wrong, or that all is well, and returns the exit code (0 or 1).
// handled is false when args are not probe flags.
func Probe(args []string, getenv func(string) string, out io.Writer) (handled bool, code int) {
	var checks []string
	for _, a := range args {
		name := strings.TrimLeft(a, "-")
		if !probeFlags[name] || name == a {
			return false, 0
		}
		checks = append(checks, name)
	}
	if len(checks) == 0 {
		return false, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	var rep *status.Report
	report := func() (*status.Report, error) {
		if rep != nil {
			return rep, nil
		}
		runDir := getenv("CALICO_RUN_DIR")
		if runDir == "" {
			runDir = status.DefaultRunDir
		}
		r, err := status.Fetch(ctx, filepath.Join(runDir, status.SocketName))
		if err != nil {
			return nil, fmt.Errorf("calico-node does not answer: %w", err)
		}
		rep = &r
		return rep, nil
	}
	var good []string
	for _, c := range checks {
		var err error
		switch c {
		case "felix-live":
			err = felixProbe(ctx, getenv, "/liveness")
		case "felix-ready":
			err = felixProbe(ctx, getenv, "/readiness")
		case "bird-live", "bird6-live":
			err = bgpLive(report)
		case "bird-ready":
			err = bgpReady(report, false)
		case "bird6-ready":
			err = bgpReady(report, true)
		}
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", c, oneLine(err))
			return true, 1
		}
		good = append(good, c)
	}
	fmt.Fprintf(out, "%s: ok\n", strings.Join(good, ", "))
	return true, 0
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// felixProbe asks felix's health endpoint (FELIX_HEALTHHOST and
// FELIX_HEALTHPORT, default localhost:9099, as Calico's probe does).
func felixProbe(ctx context.Context, getenv func(string) string, path string) error {
	host := getenv("FELIX_HEALTHHOST")
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = felix.DefaultHealthHost
	}
	port := felix.DefaultHealthPort
	if v := getenv("FELIX_HEALTHPORT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("FELIX_HEALTHPORT %q is not a port", v)
		}
		port = n
	}
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("felix's health endpoint does not answer (is healthEnabled on?): %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return errors.New(strings.TrimSpace(string(body)))
	}
	return nil
}

// bgpLive: the agent answers and runs its BGP part.
func bgpLive(report func() (*status.Report, error)) error {
	r, err := report()
	if err != nil {
		return err
	}
	if !r.BGPRunning {
		return fmt.Errorf("BGP is not running (backend %s)", r.Backend)
	}
	return nil
}

// bgpReady: live, every configured session of the family Established,
// and every route BGP learned programmed in the kernel.
func bgpReady(report func() (*status.Report, error), ipv6 bool) error {
	if err := bgpLive(report); err != nil {
		return err
	}
	r, _ := report()
	v4, v6 := status.SplitPeers(r.Peers)
	peers := v4
	if ipv6 {
		peers = v6
	}
	var down []string
	for _, p := range peers {
		if p.State != status.PeerStateUp {
			down = append(down, p.Address)
		}
	}
	if len(down) > 0 {
		return fmt.Errorf("BGP not established with %s", strings.Join(down, ","))
	}
	if rt := r.Routes; rt != nil && rt.Programmed < rt.Wanted {
		return fmt.Errorf("%d of %d BGP routes not programmed in the kernel", rt.Wanted-rt.Programmed, rt.Wanted)
	}
	return nil
}
