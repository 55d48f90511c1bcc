package agent

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"github.com/palisade-net/palisade/felix"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore/embedded"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/node/bgp"
	"github.com/palisade-net/palisade/node/startup"
	"github.com/palisade-net/palisade/node/status"
)

// Defaults of the agent's own settings.
const (
	DefaultEtcdDataDir = "/var/lib/calico/etcd"
	DefaultEtcdPeerURL = "http://127.0.0.1:2380"
	EtcdClientPort     = "2379"
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
	// http://<node IPv4>:2379 and http://127.0.0.1:2379.
	EtcdDataDir    string
	EtcdClientURLs []string
	EtcdPeerURLs   []string
	// Getenv reads the environment (for the datastore settings).
	Getenv func(string) string
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
		srv, err := startEmbedded(ctx, o, &cfg, host)
		if err != nil {
			return err
		}
		defer srv.Close()
		dsCfg.Endpoints = []string{srv.Endpoints()[0]}
		for _, ep := range srv.Endpoints() {
			if containsLoopback(ep) {
				dsCfg.Endpoints = []string{ep}
			}
		}
	}
	store, err := etcdv3.New(ctx, dsCfg)
	if err != nil {
		return fmt.Errorf("connecting to etcd: %w", err)
	}
	defer store.Close()
	c := client.New(store)

	res, err := startup.Run(ctx, cfg, c, host, startup.ProcSysctl{})
	if err != nil {
		return fmt.Errorf("startup: %w", err)
	}
	logger.WithFields(log.Fields{"ipv4": addrString(res.IPv4), "ipv6": addrString(res.IPv6)}).Info("Node registered")

	// bgpPeers lists the BGP peer table of the running speaker (nil when
	// BGP does not run).
	var bgpPeers peerLister
	peerTable := &bgp.PeerTable{}
	bgpRunning := false
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
	}

	// felix programs policy and workload routes in this namespace; it
	// reports programmed endpoints under <RunDir>/endpoint-status.
	felixDone := make(chan error, 1)
	if !o.DisableFelix {
		go func() {
			felixDone <- felix.Run(ctx, felix.Config{
				NodeName: cfg.NodeName, Store: store, StatusDir: filepath.Join(o.RunDir, felix.EndpointStatusDir),
				Log: logger,
			})
		}()
		logger.Info("felix started")
	}

	src := func(ctx context.Context) (status.Report, error) {
		rep := status.Report{NodeName: cfg.NodeName, PID: os.Getpid(), Started: started, Backend: cfg.Backend}
		rep.BGPRunning = bgpRunning
		if bgpPeers != nil {
			peers, err := bgpPeers.ListPeers(ctx)
			if err != nil {
				return rep, fmt.Errorf("listing BGP peers: %w", err)
			}
			rep.Peers = peers
		}
		return rep, nil
	}
	srv, err := status.Listen(filepath.Join(o.RunDir, status.SocketName), src)
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

// startEmbedded serves the embedded etcd on the node's IPv4 address and
// loopback (or the configured URLs).
func startEmbedded(ctx context.Context, o Options, cfg *startup.Config, host startup.Host) (*embedded.Server, error) {
	clientURLs := o.EtcdClientURLs
	if len(clientURLs) == 0 {
		clientURLs = []string{"http://127.0.0.1:" + EtcdClientPort}
		addr, err := startup.ResolveAddress(ctx, host, cfg.IP, cfg.IPMethod, false, "")
		if err != nil {
			return nil, fmt.Errorf("choosing the embedded etcd's address: %w", err)
		}
		if a := addr.Prefix.Addr(); addr.Prefix.IsValid() && !a.IsLoopback() {
			clientURLs = append([]string{"http://" + netip.AddrPortFrom(a, 2379).String()}, clientURLs...)
		}
	}
	peerURLs := o.EtcdPeerURLs
	if len(peerURLs) == 0 {
		peerURLs = []string{DefaultEtcdPeerURL}
	}
	dataDir := o.EtcdDataDir
	if dataDir == "" {
		dataDir = DefaultEtcdDataDir
	}
	log.WithFields(log.Fields{"clientURLs": clientURLs, "dataDir": dataDir}).Info("No etcd endpoint configured: serving the embedded etcd")
	srv, err := embedded.Start(ctx, embedded.Config{Name: cfg.NodeName, DataDir: dataDir, ClientURLs: clientURLs, PeerURLs: peerURLs})
	if err != nil {
		return nil, fmt.Errorf("starting the embedded etcd in %s on %v: %w", dataDir, clientURLs, err)
	}
	return srv, nil
}

func containsLoopback(u string) bool {
	return strings.Contains(u, "//127.") || strings.Contains(u, "//[::1]") || strings.Contains(u, "//localhost")
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
