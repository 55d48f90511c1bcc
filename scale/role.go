package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/node/bgp"
)

// The harness runs some of its parts as child processes of its own binary
// (the command, or a test binary): the environment variable roleEnv names
// the part, and RunRole, called first thing in main and TestMain, runs it
// and exits.
const (
	roleEnv  = "PALISADE_SCALE_ROLE"
	etcdEnv  = "PALISADE_SCALE_ETCD"
	nodeEnv  = "PALISADE_SCALE_NODE"
	sizesEnv = "PALISADE_SCALE_SIZES"
	dirEnv   = "PALISADE_SCALE_DIR"
	partsEnv = "PALISADE_SCALE_BGP_PARTS"
	// ProfileEnv names a directory: each node process writes its CPU
	// profile (<node>.cpu.pprof, from start to SIGTERM) and heap profile
	// (<node>.heap.pprof, at SIGTERM) there.
	ProfileEnv = "PALISADE_SCALE_PPROF"
)

// Roles.
const (
	// roleNode runs node/bgp's speaker for one Node (a route reflector
	// when the Node has a routeReflectorClusterID) until SIGTERM.
	roleNode = "node"
	// roleBGP runs the BGP measurements (it must be in a network
	// namespace of its own: see InNetns) and writes them as JSON.
	roleBGP = "bgp"
)

// RunRole runs the part of the harness the environment names, if any,
// and exits; without one it returns.
func RunRole() {
	role := os.Getenv(roleEnv)
	if role == "" {
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	var err error
	switch role {
	case roleNode:
		err = runNode(ctx, os.Getenv(nodeEnv), strings.Split(os.Getenv(etcdEnv), ","))
	case roleBGP:
		err = runBGP(ctx)
	default:
		err = fmt.Errorf("unknown %s %q", roleEnv, role)
	}
	if err != nil && ctx.Err() == nil {
		log.WithError(err).WithField("role", role).Error("Scale harness part failed")
		os.Exit(1)
	}
	os.Exit(0)
}

// runNode is calico-node's BGP part for one node, without kernel routes.
func runNode(ctx context.Context, name string, endpoints []string) error {
	log.SetLevel(log.WarnLevel)
	st, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: endpoints})
	if err != nil {
		return err
	}
	defer st.Close()
	if dir := os.Getenv(ProfileEnv); dir != "" {
		stop, err := profile(dir, name)
		if err != nil {
			return err
		}
		// Written as soon as SIGTERM comes, whether or not the speaker
		// is quick to return.
		written := make(chan struct{})
		go func() { <-ctx.Done(); stop(); close(written) }()
		defer func() { <-written }()
	}
	return bgp.Run(ctx, bgp.Config{NodeName: name, Store: st, KV: st.KV(), DisableKernelRoutes: true})
}

// profile starts a CPU profile of the process into dir; the function it
// returns stops it and writes a heap profile beside it.
func profile(dir, name string) (func(), error) {
	cpu, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return nil, fmt.Errorf("profiling: %w", err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, fmt.Errorf("profiling: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		if f, err := os.Create(filepath.Join(dir, name+".heap.pprof")); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
	}, nil
}

// BGPParts are the BGP measurements BGP runs: the route reflectors at
// every size, the mesh at the largest, the speaker's datastore reads at
// every size.
var BGPParts = []string{"reflector", "mesh", "bgp-reads"}

// runBGP measures the parts of partsEnv at the sizes of sizesEnv and
// prints the series as JSON on stdout.
func runBGP(ctx context.Context) error {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("bringing lo up: %v: %s", err, out)
	}
	var sizes []int
	for _, f := range strings.Split(os.Getenv(sizesEnv), ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%s %q: %w", sizesEnv, os.Getenv(sizesEnv), err)
		}
		sizes = append(sizes, n)
	}
	dir := os.Getenv(dirEnv)
	var out []Series
	for _, part := range strings.Split(os.Getenv(partsEnv), ",") {
		var s Series
		var err error
		switch part {
		case "reflector":
			s, err = Reflectors(ctx, sizes, dir)
		case "mesh":
			s, err = Mesh(ctx, sizes[len(sizes)-1:], dir)
		case "bgp-reads":
			s, err = SpeakerReads(ctx, sizes, dir)
		default:
			err = fmt.Errorf("unknown BGP part %q (%s)", part, strings.Join(BGPParts, ", "))
		}
		if err != nil {
			return err
		}
		out = append(out, s)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// BGP runs the BGP measurements parts (of BGPParts) in a child process
// inside a network namespace of its own (unshare --net: the namespace,
// and every loopback address in it, goes with the process, whichever way
// it ends). It needs root. With lock set the child runs under flock(1) on
// that file (the machine's kernel-test lock), held only while it runs.
func BGP(ctx context.Context, sizes []int, parts []string, dir, lock string) ([]Series, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the harness binary: %w", err)
	}
	var ss []string
	for _, n := range sizes {
		ss = append(ss, strconv.Itoa(n))
	}
	args := []string{"unshare", "--net", "--", self}
	if lock != "" {
		args = append([]string{"flock", lock}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), roleEnv+"="+roleBGP, sizesEnv+"="+strings.Join(ss, ","), dirEnv+"="+dir,
		partsEnv+"="+strings.Join(parts, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("the BGP measurements (unshare --net %s): %w", self, err)
	}
	var series []Series
	if err := json.Unmarshal(out, &series); err != nil {
		return nil, fmt.Errorf("reading the BGP measurements: %w", err)
	}
	return series, nil
}
