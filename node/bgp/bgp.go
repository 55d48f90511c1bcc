// Package bgp runs a node's BGP fabric: it watches the datastore, computes
// the sessions and originated routes the node should have (packages peers
// and paths, pure), reconciles them into an embedded GoBGP speaker through
// the small router.Router interface, and programs the routes it learns into
// the kernel (package kernel).
//
// The stages, one way:
//
//	datastore (Nodes, BGPPeers, BGPConfiguration, BGPFilters, IPPools,
//	  FelixConfiguration, WorkloadEndpoints, IPAM) → inputs (watched,
//	  kept in memory)
//	+ Kubernetes Services, EndpointSlices (package services, informers,
//	  only while BGPConfiguration names service CIDRs)
//	+ the node's password files and interfaces (read every second)
//	  → peers.Compute / paths.Compute           desired sessions and paths
//	  → routepolicy.Compile                     what is sent and taken
//	  → DiffPeers / DiffPaths → router.Router   minimal delta to GoBGP
//	router.WatchBestPaths → importer → kernel.Syncer   learned routes, ECMP
package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/k8s/listwatch"
	"github.com/palisade-net/palisade/node/bgp/gobgp"
	"github.com/palisade-net/palisade/node/bgp/kernel"
	"github.com/palisade-net/palisade/node/bgp/paths"
	"github.com/palisade-net/palisade/node/bgp/peers"
	"github.com/palisade-net/palisade/node/bgp/routepolicy"
	"github.com/palisade-net/palisade/node/bgp/router"
)

// DefaultGRPCListen is where GoBGP's gRPC API is served unless configured.
const DefaultGRPCListen = "127.0.0.1:50051"

// DefaultSecretsDir is where BGP passwords are read from unless
// configured: <DefaultSecretsDir>/<secret name>/<key>.
const DefaultSecretsDir = "/etc/calico/bgp-secrets"

// Config configures Run.
type Config struct {
	// NodeName is this node's Node resource name.
	NodeName string
	// Store holds the resources; KV the raw IPAM keys (for etcd both are
	// the same *etcdv3.Store: Store: s, KV: s.KV()).
	Store datastore.Interface
	KV    datastore.KV
	// GRPCListen serves GoBGP's gRPC API (for the `gobgp` CLI and
	// `calicoctl node status`); empty serves none. Pass DefaultGRPCListen
	// for Calico-like behaviour.
	GRPCListen string
	// RouteProtocol marks our kernel routes; 0 means
	// kernel.DefaultProtocol (201).
	RouteProtocol uint8
	// DisableKernelRoutes leaves the kernel alone (no import, no
	// blackholes).
	DisableKernelRoutes bool
	// AdoptProtocols are the route protocols whose routes to the IP pools
	// in the main table are taken over at start, as routes of a previous
	// run of ours (kernel.Handle.Adopt): nil means BIRD's (12), which
	// Calico's calico-node leaves behind when Palisade replaces it; empty
	// adopts none.
	AdoptProtocols []uint8
	// SecretsDir holds BGP passwords as files <SecretsDir>/<secret>/<key>
	// (a mounted Kubernetes secret has this shape), read for BGPPeer
	// password.secretKeyRef and nodeMeshPassword; DefaultSecretsDir when
	// empty. Files are read again every poll interval, so a changed
	// password takes effect without a restart.
	SecretsDir string
	// PollInterval is how often the node's own inputs, which have no
	// watch (BGP password files, interfaces), are read again (and IPAM
	// listed, with a store that cannot watch raw keys); 1 s when zero.
	// The datastore's resources and IPAM keys are watched, never polled.
	PollInterval time.Duration
	// ResyncInterval is how often the kernel routes are read back and
	// repaired; 30 s when zero.
	ResyncInterval time.Duration
	// StaleRouteTimeout bounds how long routes a previous run left in the
	// kernel are kept waiting for the sessions to come up; 60 s when
	// zero. They are removed earlier once every session is Established
	// and the learned routes have been quiet for a second.
	StaleRouteTimeout time.Duration
	// DownWarning is how long a session may stay down before the node
	// logs a warning saying why; DefaultDownWarning when zero.
	DownWarning time.Duration
	// Log is the logger; the standard one when nil.
	Log *log.Entry
	// Peers, when set, is kept pointing at the running speaker so the
	// agent's status API can list its sessions.
	Peers *PeerTable
	// Kubernetes connects to the Kubernetes API, used to watch Services
	// and EndpointSlices while BGPConfiguration names service CIDRs;
	// listwatch.FromEnv (KUBECONFIG, else in-cluster) when nil.
	Kubernetes func() (*listwatch.Client, error)
}

func (c *Config) defaults() {
	if c.SecretsDir == "" {
		c.SecretsDir = DefaultSecretsDir
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = 30 * time.Second
	}
	if c.StaleRouteTimeout == 0 {
		c.StaleRouteTimeout = 60 * time.Second
	}
	if c.DownWarning == 0 {
		c.DownWarning = DefaultDownWarning
	}
	if c.Log == nil {
		c.Log = log.NewEntry(log.StandardLogger())
	}
	if c.Kubernetes == nil {
		c.Kubernetes = listwatch.FromEnv
	}
	if c.AdoptProtocols == nil {
		c.AdoptProtocols = []uint8{kernel.BirdProtocol}
	}
	c.Log = c.Log.WithField("node", c.NodeName)
}

// Run runs the node's BGP speaker until ctx ends. It waits for the Node
// resource to carry a BGP address, then peers and advertises as the
// resources say. Kernel routes are programmed in the network namespace of
// the calling thread. On return the kernel routes are left in place (so a
// restart keeps forwarding; the next run removes what went stale), and so
// are GoBGP's sessions: they end with the process, without a NOTIFICATION,
// so that peers treat a stop (SIGTERM) as they treat a crash and keep the
// node's routes until it is back (graceful restart). Call Run once per
// process.
//
//	func Run(ctx context.Context, cfg Config) error
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if cfg.NodeName == "" || cfg.Store == nil || cfg.KV == nil {
		return errors.New("bgp: NodeName, Store and KV are required")
	}
	var sync *kernel.Syncer
	restarting := false
	if !cfg.DisableKernelRoutes {
		h, err := kernel.Open(cfg.RouteProtocol)
		if err != nil {
			return fmt.Errorf("bgp: %w", err)
		}
		defer h.Close()
		var pools []netip.Prefix
		if len(cfg.AdoptProtocols) > 0 {
			if pools, err = poolCIDRs(ctx, cfg); err != nil {
				return err
			}
		}
		for _, p := range cfg.AdoptProtocols {
			n, err := h.Adopt(p, pools)
			if err != nil {
				cfg.Log.WithError(err).WithField("protocol", p).Warn("Taking over the routes another daemon left")
			}
			if n > 0 {
				cfg.Log.WithFields(log.Fields{"protocol": p, "routes": n}).Info("Took over the routes to IP pools another BGP daemon (Calico's BIRD) left; kept until this node's sessions have converged")
			}
		}
		left, err := h.List()
		if err != nil {
			return fmt.Errorf("bgp: reading kernel routes: %w", err)
		}
		// Routes of ours in the kernel mean a previous run forwarded until
		// it stopped: restart gracefully.
		restarting = len(left) > 0
		sync = kernel.NewSyncer(h, cfg.Log.WithField("component", "routes"))
		cfg.Peers.setRoutes(sync)
		defer cfg.Peers.setRoutes(nil)
		if _, err := sync.Resync(false); err != nil {
			return fmt.Errorf("bgp: %w", err)
		}
	}
	for {
		err := runSpeaker(ctx, cfg, sync, restarting)
		if !errors.Is(err, errGlobalChanged) {
			return err
		}
		cfg.Log.Info("BGP identity changed; restarting the speaker")
		restarting = false
	}
}

var errGlobalChanged = errors.New("global BGP settings changed")

// poolCIDRs lists the IP pools' CIDRs, the destinations whose routes
// another daemon left are taken over, trying again every second while
// the datastore cannot be read.
func poolCIDRs(ctx context.Context, cfg Config) ([]netip.Prefix, error) {
	for warned := false; ; warned = true {
		pools, err := listAs[*v3.IPPool](ctx, cfg.Store, v3.KindIPPool)
		if err == nil {
			var out []netip.Prefix
			for _, p := range pools {
				if c, err := netip.ParsePrefix(p.Spec.CIDR); err == nil {
					out = append(out, c.Masked())
				}
			}
			return out, nil
		}
		if !warned {
			cfg.Log.WithError(err).Warn("Reading the IP pools, to take over the routes Calico's BIRD left in them; trying again")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// state is what one reconcile round computes.
type state struct {
	peers  peers.Result
	paths  paths.Result
	policy routepolicy.Policy
	port   int32
	// listen are the addresses GoBGP listens on (bindMode NodeIP); empty
	// means all.
	listen []string
	// ignoredNets are the subnets of ignoredInterfaces.
	ignoredNets []netip.Prefix
	errors      []error
	// ignored says which BGPPeer and BGPConfiguration fields are set but
	// not acted on, and which BGPFilter references do not resolve: each
	// is logged once as a warning.
	ignored []string
	// local is what the round read from the node itself.
	local localState
}

// localState is what a round read from the node itself rather than the
// datastore: the BGP password files and the interfaces. These have no
// watch; they are read again every poll interval, and a round is
// computed again when they changed.
type localState struct {
	secretsDir string
	passwords  map[v3.SecretKeySelector]secretFile
	ignored    []string // ignoredInterfaces patterns
	ifaces     map[string][]netip.Prefix
	dropped    []netip.Prefix
}

// secretFile is what a password file held when read.
type secretFile struct {
	value string
	ok    bool
}

// changed reads the password files and interfaces again and says
// whether they differ from what the round saw.
func (l localState) changed() bool {
	for ref, was := range l.passwords {
		v, ok := readSecret(l.secretsDir, ref)
		if v != was.value || ok != was.ok {
			return true
		}
	}
	ifaces, dropped, err := nodeInterfaces(l.ignored)
	return err != nil || !reflect.DeepEqual(ifaces, l.ifaces) || !slices.Equal(dropped, l.dropped)
}

// render computes the desired state from the datastore inputs, the
// node's password files and interfaces.
func render(cfg Config, in snapshot, svcs *serviceFeed) (state, error) {
	var st state
	var conf *v3.BGPConfigurationSpec
	for _, c := range in.configs {
		switch c.Name {
		case "default":
			conf = &c.Spec
		case "node." + cfg.NodeName:
			st.port = int32(c.Spec.ListenPort)
			for _, note := range IgnoredNodeConfig(c.Spec) {
				st.ignored = append(st.ignored, "bgpconfiguration "+c.Name+": "+note)
			}
		}
	}
	if st.port == 0 && conf != nil {
		st.port = int32(conf.ListenPort)
	}
	if conf != nil {
		for _, note := range IgnoredConfig(*conf) {
			st.ignored = append(st.ignored, "bgpconfiguration default: "+note)
		}
	}
	st.local = localState{secretsDir: cfg.SecretsDir, passwords: map[v3.SecretKeySelector]secretFile{}}
	password := func(ref v3.SecretKeySelector) (string, bool) {
		v, ok := readSecret(cfg.SecretsDir, ref)
		st.local.passwords[ref] = secretFile{value: v, ok: ok}
		return v, ok
	}
	pin := peers.Input{NodeName: cfg.NodeName, Config: conf, Nodes: in.nodes, Peers: in.bgpPeers, Password: password, Workloads: in.local}
	for _, p := range in.bgpPeers {
		for _, note := range peers.Ignored(p) {
			st.ignored = append(st.ignored, fmt.Sprintf("bgppeer %q: %s", p.Name, note))
		}
	}
	st.peers, st.errors = peers.Compute(pin)
	floatingOn := floatingEnabled(cfg.NodeName, in.felix)
	ain := paths.Input{NodeName: cfg.NodeName, Affinities: in.affinities, Blocks: in.blocks, Config: conf,
		Floating: in.floating, FloatingEnabled: floatingOn, Workloads: in.workloads, Pools: in.pools}
	if st.peers.Local.IPv4.IsValid() {
		ain.IPv4 = st.peers.Local.IPv4.Addr()
	}
	if st.peers.Local.IPv6.IsValid() {
		ain.IPv6 = st.peers.Local.IPv6.Addr()
	}
	var note string
	ain.Services, note = svcs.services(conf)
	if note != "" {
		st.ignored = append(st.ignored, note)
	}
	var perrs []error
	st.paths, perrs = paths.Compute(ain)
	st.errors = append(st.errors, perrs...)

	if conf != nil {
		st.local.ignored = conf.IgnoredInterfaces
		if conf.BindMode != nil && *conf.BindMode == v3.BindModeNodeIP {
			for _, a := range []netip.Prefix{st.peers.Local.IPv4, st.peers.Local.IPv6} {
				if a.IsValid() {
					st.listen = append(st.listen, a.Addr().String())
				}
			}
		}
	}
	ifaces, dropped, err := nodeInterfaces(st.local.ignored)
	if err != nil {
		return st, err
	}
	st.local.ifaces, st.local.dropped = ifaces, dropped
	st.ignoredNets = dropped
	pol := routepolicy.Input{Local: st.peers.Local, Peers: st.peers.Peers, Filters: st.peers.Filters, Interfaces: ifaces, BGPFilters: in.filters}
	var rerrs []error
	st.policy, rerrs = routepolicy.Compile(pol)
	for _, e := range rerrs {
		st.ignored = append(st.ignored, e.Error())
	}
	return st, nil
}

// floatingEnabled says whether this node's felix programs floating IPs:
// its FelixConfiguration (node.<name> over default) has floatingIPs
// Enabled, as felix/calc decides (on either dataplane).
func floatingEnabled(node string, fcs []v3.FelixConfiguration) bool {
	floatingIPs := ""
	for _, name := range []string{"default", "node." + node} {
		for _, fc := range fcs {
			if fc.Name == name && fc.Spec.FloatingIPs != "" {
				floatingIPs = fc.Spec.FloatingIPs
			}
		}
	}
	return strings.EqualFold(floatingIPs, "Enabled")
}

// listAs lists one kind.
func listAs[T v3.Resource](ctx context.Context, s datastore.Interface, kind string) ([]T, error) {
	items, _, err := s.List(ctx, datastore.ListOptions{Kind: kind})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", kind, err)
	}
	out := make([]T, 0, len(items))
	for _, it := range items {
		if t, ok := it.(T); ok {
			out = append(out, t)
		}
	}
	return out, nil
}

// readSecret reads a password from its file <dir>/<secret>/<key>.
func readSecret(dir string, ref v3.SecretKeySelector) (string, bool) {
	b, err := os.ReadFile(filepath.Join(dir, filepath.Base(ref.Name), filepath.Base(ref.Key)))
	if err != nil {
		return "", false
	}
	// A file written by hand usually ends in a newline that is not part
	// of the password.
	return strings.TrimRight(string(b), "\r\n"), true
}

// routerID picks the router ID: the IPv4 address, or for an IPv6-only node
// a stable 32-bit value from its IPv6 address.
func routerID(l peers.Local) netip.Addr {
	if l.RouterID.IsValid() {
		return l.RouterID
	}
	b := l.IPv6.Addr().As16()
	return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
}

// runSpeaker runs one GoBGP instance while the node's BGP identity stays
// the same.
func runSpeaker(ctx context.Context, cfg Config, sync *kernel.Syncer, restarting bool) error {
	trigger := make(chan struct{}, 1)
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := newInputs(cfg, poke)
	in.run(wctx)
	svcs := &serviceFeed{ctx: wctx, node: cfg.NodeName, connect: cfg.Kubernetes, log: cfg.Log.WithField("component", "services"), poke: poke}
	defer svcs.stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-in.Ready():
	}

	// Wait for our Node to carry an address.
	var st state
	for {
		var err error
		st, err = render(cfg, in.snapshot(), svcs)
		if err == nil && (st.peers.Local.IPv4.IsValid() || st.peers.Local.IPv6.IsValid()) {
			break
		}
		if err != nil {
			cfg.Log.WithError(err).Warn("Reading BGP resources")
		} else {
			cfg.Log.Info("Waiting for this node's BGP address")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-trigger:
		case <-time.After(cfg.PollInterval):
		}
	}
	global := router.Global{AS: st.peers.Local.AS, RouterID: routerID(st.peers.Local), ListenPort: st.port, ListenAddresses: st.listen,
		Restarting: restarting, Policy: st.policy}
	r := gobgp.New(cfg.GRPCListen, cfg.Log)
	if err := r.Start(ctx, global); err != nil {
		_ = r.Stop(context.Background())
		return fmt.Errorf("bgp: %w", err)
	}
	cfg.Peers.set(r)
	defer func() {
		cfg.Peers.set(nil)
		if ctx.Err() != nil {
			// The node stops: its sessions end with the process, with no
			// NOTIFICATION, so peers keep its routes while it restarts.
			r.Leave()
			return
		}
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = r.Stop(sctx)
	}()
	cfg.Log.WithFields(log.Fields{"as": global.AS, "routerID": global.RouterID, "restarting": restarting}).Info("BGP speaker started")

	var im *importer
	if sync != nil {
		im = newImporter(sync)
		if err := r.WatchBestPaths(wctx, im.onRoutes); err != nil {
			return fmt.Errorf("bgp: %w", err)
		}
	}

	rec := &reconciler{r: r, log: cfg.Log, peers: map[string]peers.Peer{}, paths: map[netip.Prefix]paths.Path{}}
	start := time.Now()
	staleRemoved := sync == nil
	poll := time.NewTicker(cfg.PollInterval)
	defer poll.Stop()
	resync := time.NewTicker(cfg.ResyncInterval)
	defer resync.Stop()
	lastLearn := time.Now()
	warned := map[string]bool{} // ignored fields are said once a run
	down := newDownWatch(cfg.DownWarning)
	for {
		if len(st.errors) > 0 {
			for _, e := range st.errors {
				cfg.Log.WithError(e).Debug("Skipping invalid BGP resource")
			}
		}
		for _, note := range st.ignored {
			if !warned[note] {
				warned[note] = true
				cfg.Log.Warn(note)
			}
		}
		want := router.Global{AS: st.peers.Local.AS, RouterID: routerID(st.peers.Local), ListenPort: st.port, ListenAddresses: st.listen}
		if want.AS != global.AS || want.RouterID != global.RouterID || want.ListenPort != global.ListenPort ||
			!slices.Equal(want.ListenAddresses, global.ListenAddresses) {
			return errGlobalChanged
		}
		if im != nil {
			var self []netip.Addr
			for _, p := range []netip.Prefix{st.peers.Local.IPv4, st.peers.Local.IPv6} {
				if p.IsValid() {
					self = append(self, p.Addr())
				}
			}
			originated := make([]netip.Prefix, 0, len(st.paths.Paths))
			for _, p := range st.paths.Paths {
				originated = append(originated, p.Prefix)
			}
			im.setLocal(localRoutes{Blocks: st.paths.Blocks, Lent: st.paths.Lent, Originated: originated, Self: self, Ignored: st.ignoredNets, FelixOwned: st.paths.FelixOwned,
				Static: reachableRoutes(st.peers.Peers)})
		}
		rec.apply(ctx, st)

		// A round is computed again when the datastore inputs changed
		// (their watches poke the trigger), when the node's own inputs
		// changed (read every poll interval), and at each resync; the
		// datastore is never re-listed for it.
		recompute := true
		select {
		case <-ctx.Done():
			return nil
		case <-trigger:
			// Let a burst of changes settle into one round.
			time.Sleep(50 * time.Millisecond)
		case <-poll.C:
			recompute = st.local.changed()
		case <-resync.C:
			if sync != nil {
				if s, err := sync.Resync(staleRemoved); err != nil {
					cfg.Log.WithError(err).Warn("Kernel route resync failed")
				} else if s.Added+s.Replaced+s.Deleted > 0 {
					cfg.Log.WithField("stats", s.String()).Info("Kernel routes repaired")
				}
			}
		}
		if im != nil {
			select {
			case <-im.lastChange:
				lastLearn = time.Now()
			default:
			}
		}
		ps, perr := r.ListPeers(ctx)
		if perr == nil {
			down.observe(cfg.Log, ps, time.Now())
			cfg.Peers.observe(ps, time.Now())
		}
		if !staleRemoved {
			converged := false
			// Converged: every session is up and has sent its whole
			// table (End-of-RIB). Before that, a route from the previous
			// run may only be missing because it has not arrived yet.
			if perr == nil {
				converged = true
				for _, p := range ps {
					converged = converged && p.State == "Established" && p.EndOfRIB
				}
			}
			if (converged && time.Since(lastLearn) > time.Second) || time.Since(start) > cfg.StaleRouteTimeout {
				s, err := sync.Resync(true)
				if err != nil {
					cfg.Log.WithError(err).Warn("Kernel route resync failed")
				} else {
					staleRemoved = true
					r.Converged()
					cfg.Log.WithField("stats", s.String()).Info("Kernel routes in sync; stale routes removed")
				}
			}
		}
		if !recompute {
			continue
		}
		next, err := render(cfg, in.snapshot(), svcs)
		if err != nil {
			cfg.Log.WithError(err).Warn("Reading BGP resources")
			continue
		}
		st = next
	}
}

// reconciler remembers what it applied to the router.
type reconciler struct {
	r     router.Router
	log   *log.Entry
	peers map[string]peers.Peer
	paths map[netip.Prefix]paths.Path
}

// apply pushes the minimal delta: paths first (so a session coming up
// gets them before its End-of-RIB), then the route policy (so a new
// session is filtered from its first update), then sessions.
func (rc *reconciler) apply(ctx context.Context, st state) {
	adv, wd := DiffPaths(rc.paths, st.paths.Paths)
	for _, p := range wd {
		if err := rc.r.WithdrawPath(ctx, p); err != nil {
			rc.log.WithError(err).Warn("Withdrawing path")
		}
		delete(rc.paths, p.Prefix)
	}
	for _, p := range adv {
		if err := rc.r.AdvertisePath(ctx, p); err != nil {
			rc.log.WithError(err).Warn("Advertising path")
			continue
		}
		rc.paths[p.Prefix] = p
	}
	if err := rc.r.SetPolicy(ctx, st.policy); err != nil {
		rc.log.WithError(err).Warn("Setting the route policy")
	}
	plan := DiffPeers(rc.peers, st.peers.Peers)
	for _, p := range plan.Delete {
		if err := rc.r.DeletePeer(ctx, p); err != nil {
			rc.log.WithError(err).Warn("Deleting peer")
		}
		delete(rc.peers, p.Key())
	}
	for _, p := range plan.Add {
		if err := rc.r.AddPeer(ctx, p); err != nil {
			rc.log.WithError(err).Warn("Adding peer")
			continue
		}
		rc.peers[p.Key()] = p
	}
	for _, p := range plan.Update {
		if err := rc.r.UpdatePeer(ctx, p); err != nil {
			rc.log.WithError(err).Warn("Updating peer")
			continue
		}
		rc.peers[p.Key()] = p
	}
	if len(adv)+len(wd) > 0 || !plan.Empty() {
		rc.log.WithFields(log.Fields{
			"advertised": len(adv), "withdrawn": len(wd),
			"peersAdded": len(plan.Add), "peersUpdated": len(plan.Update), "peersDeleted": len(plan.Delete),
		}).Info("BGP state reconciled")
	}
}
