package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"github.com/palisade-net/palisade/felix"
	"github.com/palisade-net/palisade/felix/kubeslices"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s/listwatch"
	libmetrics "github.com/palisade-net/palisade/libcalico/metrics"
	"github.com/palisade-net/palisade/node/bgp"
	"github.com/palisade-net/palisade/node/startup"
	"github.com/palisade-net/palisade/node/status"
)

// Defaults of the agent's own settings.
const (
	DefaultEtcdDataDir = "/var/lib/calico/etcd"
	EtcdClientPort     = 2379
	EtcdPeerPort       = 2380
)

// Options configure one agent run.
type Options struct {
	// Startup is the node's registration settings.
	Startup startup.Config
	// ConfigPath is a calicoctl-style CalicoAPIConfig for the datastore.
	ConfigPath string
	// RunDir holds the pid file and the status socket.
	RunDir string
	// EtcdDataDir, EtcdClientURLs and EtcdPeerURLs configure the embedded
	// etcd served when no endpoint is configured. Empty client URLs mean
	// https://<node IPv4>:2379 and https://127.0.0.1:2379, empty peer
	// URLs https://127.0.0.1:2380 (http:// with EtcdPlaintext).
	EtcdDataDir    string
	EtcdClientURLs []string
	EtcdPeerURLs   []string
	// EtcdPlaintext serves the embedded etcd over plain HTTP, to anyone
	// who reaches it; by default it is TLS with client certificates.
	EtcdPlaintext bool
	// EtcdJoinFile is where the join file is written (default join.cfg in
	// EtcdDataDir).
	EtcdJoinFile string
	// Getenv reads the environment (for the datastore settings).
	Getenv func(string) string
	// Environ lists the environment, for felix's FELIX_* variables
	// (os.Environ when nil).
	Environ func() []string
	// FelixConfigFile is felix's configuration file (felix.DefaultConfigFile
	// when empty; absent is fine).
	FelixConfigFile string
	// BGPGRPCListen is where GoBGP's gRPC API is served ("" for none).
	BGPGRPCListen string
	// BGPRouteProtocol marks the kernel routes BGP programs; 0 means
	// kernel.DefaultProtocol.
	BGPRouteProtocol uint8
	// Ready, when set, is called once the node is registered and the
	// status API serves.
	Ready func()
	// DisableFelix leaves policy (iptables, workload routes) alone.
	DisableFelix bool
	// BGPMetricsAddr is where BGP metrics are served ("" for nowhere;
	// BGP_PROMETHEUSMETRICSENABLED and friends).
	BGPMetricsAddr string
}

// peerLister is what the agent needs from the BGP part for its status.
type peerLister interface {
	ListPeers(ctx context.Context) ([]status.PeerStatus, error)
}

// Run runs the agent until ctx ends: it claims the pid file, connects to
// etcd (or serves the embedded one), runs startup, serves the status API
// and runs the BGP part. It cleans up everything it started on return.
func Run(ctx context.Context, o Options) (err error) {
	started := time.Now()
	cfg := o.Startup
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := log.WithFields(log.Fields{"node": cfg.NodeName, "backend": cfg.Backend})
	pidFile := filepath.Join(o.RunDir, status.PIDFileName)
	if err := status.ClaimPIDFile(pidFile); err != nil {
		return err
	}
	defer status.ReleasePIDFile(pidFile)

	nl, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}
	defer nl.Close()
	host := startup.NetlinkHost{Handle: nl}

	dsCfg, err := datastoreConfig(o.ConfigPath, o.Getenv)
	if err != nil {
		return err
	}
	if len(dsCfg.Endpoints) == 0 {
		srv, local, err := startEmbedded(ctx, o, &cfg, host)
		if err != nil {
			return err
		}
		defer srv.Close()
		local.DialTimeout = dsCfg.DialTimeout
		dsCfg = local
	}
	store, err := etcdv3.New(ctx, dsCfg)
	if err != nil {
		return fmt.Errorf("connecting to etcd: %w", err)
	}
	defer store.Close()
	c := client.New(store)
	ds := newHealth(logger.WithField("part", "datastore"), dsCfg.Endpoints, time.Now())

	res, err := startup.Run(ctx, cfg, c, host, startup.ProcSysctl{})
	if err != nil {
		return fmt.Errorf("startup: %w", err)
	}
	logger.WithFields(log.Fields{"ipv4": addrString(res.IPv4), "ipv6": addrString(res.IPv6)}).Info("Node registered")
	ipamCtx, stopIPAM := context.WithCancel(ctx)
	defer stopIPAM()
	go releaseUnusedBlocks(ipamCtx, ipam.New(store, store.KV()), cfg.NodeName, logger.WithField("part", "ipam"))

	// bgpPeers lists the BGP peer table of the running speaker (nil when
	// BGP does not run).
	var bgpPeers peerLister
	peerTable := &bgp.PeerTable{}
	bgpRunning := false
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go ds.run(ctx, kvProbe(store.KV()))
	// The node's VXLAN tunnel addresses follow the IP pools, as Calico's
	// tunnel address allocator does.
	go startup.RunTunnelAddrs(ctx, c, store, ipam.New(store, store.KV()), cfg.NodeName)
	bgpDone := make(chan error, 1)
	if cfg.BGPEnabled() {
		bgpRunning = true
		go func() {
			bgpDone <- bgp.Run(ctx, bgp.Config{
				NodeName: cfg.NodeName, Store: store, KV: store.KV(),
				GRPCListen: o.BGPGRPCListen, RouteProtocol: o.BGPRouteProtocol, Log: logger.WithField("part", "bgp"), Peers: peerTable,
			})
		}()
		bgpPeers = bgpPeerLister{peerTable}
		logger.WithField("grpc", o.BGPGRPCListen).Info("BGP (embedded GoBGP) started")
		if o.BGPMetricsAddr != "" {
			reg := prometheus.NewRegistry()
			reg.MustRegister(bgpCollector{table: peerTable, log: logger.WithField("part", "bgp-metrics")})
			ep := libmetrics.NewEndpoint("bgp-metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), logger)
			if err := ep.Set(o.BGPMetricsAddr); err != nil {
				return err
			}
			defer ep.Close()
		}
	}

	// felix programs policy and workload routes in this namespace; it
	// reports programmed endpoints under <RunDir>/endpoint-status.
	felixDone := make(chan error, 1)
	var policy status.Policy
	if !o.DisableFelix {
		environ, felixFile := o.Environ, o.FelixConfigFile
		if environ == nil {
			environ = os.Environ
		}
		if felixFile == "" {
			felixFile = felix.DefaultConfigFile
		}
		inspector := felix.NewInspector()
		policy = livePolicy{inspector: inspector, store: store}
		go func() {
			felixDone <- felix.Run(ctx, felix.Config{
				NodeName: cfg.NodeName, Store: store, KV: store.KV(), StatusDir: filepath.Join(o.RunDir, felix.EndpointStatusDir),
				MTUFile: filepath.Join(filepath.Dir(cfg.NodenameFile), "mtu"), OverlayBlackholes: !cfg.BGPEnabled(), Log: logger, Environ: environ(), ConfigFile: felixFile, DatastoreHealth: ds.err,
				Inspector: inspector, EndpointSlices: endpointSlices(o.Getenv, logger),
			})
		}()
		logger.Info("felix started")
	}

	src := func(ctx context.Context) (status.Report, error) {
		rep := status.Report{NodeName: cfg.NodeName, PID: os.Getpid(), Started: started, Backend: cfg.Backend}
		rep.BGPRunning = bgpRunning
		rep.Datastore = ds.status()
		if wanted, programmed, ok := peerTable.Routes(); ok {
			rep.Routes = &status.RouteStatus{Wanted: wanted, Programmed: programmed}
		}
		if bgpPeers != nil {
			peers, err := bgpPeers.ListPeers(ctx)
			if err != nil {
				return rep, fmt.Errorf("listing BGP peers: %w", err)
			}
			rep.Peers = peers
		}
		return rep, nil
	}
	srv, err := status.Listen(filepath.Join(o.RunDir, status.SocketName), src, policy)
	if err != nil {
		return err
	}
	defer srv.Close()
	logger.Info("calico-node is running")
	if o.Ready != nil {
		o.Ready()
	}
	select {
	case <-ctx.Done():
		logger.Info("calico-node stopping")
		<-waitBGP(bgpRunning, bgpDone)
		<-waitBGP(!o.DisableFelix, felixDone)
		return nil
	case err := <-felixDone:
		if err != nil {
			return fmt.Errorf("felix: %w", err)
		}
		return fmt.Errorf("felix: stopped unexpectedly")
	case err := <-bgpDone:
		if err != nil {
			return fmt.Errorf("bgp: %w", err)
		}
		return fmt.Errorf("bgp: stopped unexpectedly")
	}
}

func addrString(a startup.Address) string {
	if !a.Prefix.IsValid() {
		return "none"
	}
	return a.Prefix.String()
}

// waitBGP returns a channel that is closed once the BGP part has returned
// (at once when it never ran).
func waitBGP(running bool, done <-chan error) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		if running {
			<-done
		}
		close(c)
	}()
	return c
}

// endpointSlices is felix's source of Kubernetes EndpointSlices (for
// rules naming a Service), over the client calico-node's BGP service
// advertisement also uses: the kubeconfig KUBECONFIG names, or the
// in-cluster service account. Nil outside Kubernetes, where such rules
// fail closed.
func endpointSlices(getenv func(string) string, logger *log.Entry) felix.UpdateSource {
	if getenv == nil || getenv("KUBECONFIG") == "" && getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil
	}
	return &kubeslices.Source{Connect: listwatch.FromEnv, Log: logger}
}
