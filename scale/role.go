package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/scale/node"
)

// The harness runs some of its parts as child processes of its own binary
// (the command, or a test binary): the environment variable roleEnv names
// the part, and RunRole, called first thing in main and TestMain, runs it
// and exits.
const (
	roleEnv  = "PALISADE_SCALE_ROLE"
	sizesEnv = "PALISADE_SCALE_SIZES"
	dirEnv   = "PALISADE_SCALE_DIR"
	partsEnv = "PALISADE_SCALE_BGP_PARTS"
	etcdEnv  = "PALISADE_SCALE_ETCD"
)

// Roles.
const (
	// roleNode runs node/bgp's speaker for one Node (package
	// scale/node), when the scale-node binary is not at hand.
	roleNode = "node"
	// roleBGP runs the BGP measurements (it must be in a network
	// namespace of its own: see InNetns) and writes them as JSON.
	roleBGP = "bgp"
	// roleCache runs the fan-out cache (calico-etcd-proxy) in front of
	// the etcd of etcdEnv until SIGTERM, printing its address.
	roleCache = "cache"
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
		err = node.Run(ctx)
	case roleBGP:
		err = runBGP(ctx)
	case roleCache:
		err = runCache(ctx, strings.Split(os.Getenv(etcdEnv), ","))
	default:
		err = fmt.Errorf("unknown %s %q", roleEnv, role)
	}
	if err != nil && ctx.Err() == nil {
		log.WithError(err).WithField("role", role).Error("Scale harness part failed")
		os.Exit(1)
	}
	os.Exit(0)
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
