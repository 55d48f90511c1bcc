// Package agent builds the calico-node command line: the per-node agent that
// registers the node (startup), serves the embedded etcd when no datastore
// is configured, runs the BGP part and serves its status to calicoctl.
package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	log "github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/felix/dataplane/vxlan"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
	"github.com/palisade-net/palisade/node/bgp"
	"github.com/palisade-net/palisade/node/bgp/kernel"
	"github.com/palisade-net/palisade/node/startup"
	"github.com/palisade-net/palisade/node/status"
)

// NewRoot returns the calico-node root command writing to out and errOut,
// configured from the process environment and its flags.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	return NewRootEnv(out, errOut, os.Getenv)
}

// NewRootEnv is NewRoot reading the environment through getenv.
func NewRootEnv(out, errOut io.Writer, getenv func(string) string) *cobra.Command {
	var (
		f         flagValues
		logLevel  string
		envErr    error
		startCfg  startup.Config
		clientURL string
		peerURL   string
		grpc      string
		rtProto   string
		plaintext bool
		joinFile  string
	)
	startCfg, envErr = startup.FromEnv(getenv)
	def := func(name, fallback string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return fallback
	}
	root := &cobra.Command{
		Use:   "calico-node",
		Short: "The Palisade per-node agent",
		Long: `calico-node is the per-node agent of Palisade. It registers this host as a
Calico Node (addresses autodetected with their prefix lengths, AS number),
creates the default IP pools and ClusterInformation, turns on IP forwarding,
writes the node name for the CNI plugin, and serves its status on a unix
socket for "calicoctl node status". With no etcd endpoint configured
(ETCD_ENDPOINTS or the config file) it serves an embedded etcd on the node
address and 127.0.0.1:2379 for the other nodes and calicoctl: TLS, with
client certificates from a CA it makes in the etcd data directory, and a
join file there (join.cfg, a calicoctl configuration with the endpoints and
a client certificate) that other nodes and calicoctl use. Plain HTTP only
with CALICO_ETCD_PLAINTEXT=true.

It is configured like Calico's calico-node by environment (NODENAME, IP, IP6,
IP_AUTODETECTION_METHOD, IP6_AUTODETECTION_METHOD, AS,
CALICO_NETWORKING_BACKEND, CALICO_IPV4POOL_CIDR, CALICO_IPV4POOL_BLOCK_SIZE,
CALICO_IPV4POOL_NAT_OUTGOING, CALICO_IPV4POOL_VXLAN, CALICO_IPV6POOL_CIDR,
NO_DEFAULT_POOLS, ETCD_ENDPOINTS, ETCD_*); flags override the environment.

With the bird (meaning the embedded GoBGP) or gobgp backend it runs the BGP
fabric and serves GoBGP's gRPC API on 127.0.0.1:50051 (--bgp-grpc-listen);
the routes it learns are kernel routes of protocol 201
(--bgp-route-protocol).

felix serves /liveness and /readiness and Prometheus metrics as
FelixConfiguration's healthEnabled and prometheusMetricsEnabled (and their
FELIX_* variables) say; BGP metrics are served on :9900 with
BGP_PROMETHEUSMETRICSENABLED=true (BGP_PROMETHEUSMETRICSHOST, _PORT).
As exec probes, "calico-node -felix-live", "-felix-ready", "-bird-live"
and "-bird-ready" print one line and exit 0 or 1 (docs/metrics.md).

It stops cleanly on SIGTERM or SIGINT.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if envErr != nil {
				return envErr
			}
			lvl, err := log.ParseLevel(logLevel)
			if err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log.SetOutput(errOut)
			log.SetLevel(lvl)
			log.SetFormatter(&log.TextFormatter{FullTimestamp: true})
			f.apply(cmd, &startCfg)
			if !cmd.Flags().Changed("etcd-plaintext") {
				if plaintext, err = envBool(getenv, "CALICO_ETCD_PLAINTEXT"); err != nil {
					return err
				}
			}
			if grpc == "none" {
				grpc = ""
			}
			proto, err := routeProtocol(rtProto)
			if err != nil {
				return err
			}
			bgpMetrics, err := bgpMetricsAddr(getenv)
			if err != nil {
				return err
			}
			o := Options{
				BGPMetricsAddr: bgpMetrics,
				Startup:        startCfg, ConfigPath: f.configPath, RunDir: f.runDir,
				EtcdDataDir: f.etcdDataDir, Getenv: getenv,
				EtcdClientURLs: splitList(clientURL), EtcdPeerURLs: splitList(peerURL),
				EtcdPlaintext: plaintext, EtcdJoinFile: joinFile,
				BGPGRPCListen: grpc, BGPRouteProtocol: proto,
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return Run(ctx, o)
		},
	}
	root.SetOut(out)
	root.SetErr(errOut)
	fl := root.Flags()
	fl.StringVar(&f.name, "name", "", "Node name (NODENAME; default the host name)")
	fl.StringVar(&f.ip, "ip", "", "IPv4 address with or without prefix length, autodetect or none (IP)")
	fl.StringVar(&f.ip6, "ip6", "", "IPv6 address with or without prefix length, autodetect or none (IP6)")
	fl.StringVar(&f.as, "as", "", "AS number of this node (AS; default the cluster's)")
	fl.StringVar(&f.ipMethod, "ip-autodetection-method", "", "IPv4 autodetection: first-found, can-reach=<ip>, interface=<regex>, skip-interface=<regex>, cidr=<cidr,...> (IP_AUTODETECTION_METHOD)")
	fl.StringVar(&f.ip6Method, "ip6-autodetection-method", "", "IPv6 autodetection method (IP6_AUTODETECTION_METHOD)")
	fl.StringVar(&f.backend, "backend", "", "Networking backend: bird (the embedded GoBGP), gobgp, vxlan or none (CALICO_NETWORKING_BACKEND)")
	fl.BoolVar(&f.noPools, "no-default-ippools", false, "Do not create the default IP pools (NO_DEFAULT_POOLS)")
	fl.StringVar(&f.configPath, "config", DefaultConfigPath, "calicoctl-style file with the datastore settings")
	fl.StringVar(&f.runDir, "run-dir", def("CALICO_RUN_DIR", status.DefaultRunDir), "Directory of the pid file and status socket (CALICO_RUN_DIR)")
	fl.StringVar(&f.nodenameFile, "nodename-file", "", "Where the node name is written for the CNI plugin (CALICO_NODENAME_FILE; default "+startup.DefaultNodenameFile+")")
	fl.StringVar(&f.etcdDataDir, "etcd-data-dir", def("CALICO_ETCD_DATA_DIR", DefaultEtcdDataDir), "Data directory of the embedded etcd (CALICO_ETCD_DATA_DIR)")
	fl.StringVar(&clientURL, "etcd-client-urls", getenv("CALICO_ETCD_CLIENT_URLS"), "Client URLs of the embedded etcd, comma-separated (CALICO_ETCD_CLIENT_URLS; default https://<node IPv4>:2379,https://127.0.0.1:2379)")
	fl.StringVar(&peerURL, "etcd-peer-urls", getenv("CALICO_ETCD_PEER_URLS"), "Peer URLs of the embedded etcd (CALICO_ETCD_PEER_URLS; default https://127.0.0.1:2380)")
	fl.StringVar(&joinFile, "etcd-join-file", getenv("CALICO_ETCD_JOIN_FILE"), "Where the embedded etcd's join file is written (CALICO_ETCD_JOIN_FILE; default join.cfg in the etcd data directory)")
	fl.BoolVar(&plaintext, "etcd-plaintext", false, "Serve the embedded etcd over plain HTTP with no client authentication: anyone who reaches it can change everything (CALICO_ETCD_PLAINTEXT=true)")
	fl.StringVar(&grpc, "bgp-grpc-listen", def("CALICO_BGP_GRPC_LISTEN", bgp.DefaultGRPCListen), "Address of GoBGP's gRPC API, for the gobgp CLI; \"none\" serves none (CALICO_BGP_GRPC_LISTEN)")
	fl.StringVar(&rtProto, "bgp-route-protocol", getenv("CALICO_BGP_ROUTE_PROTOCOL"), fmt.Sprintf("Route protocol number of the kernel routes BGP programs, 5-255 (CALICO_BGP_ROUTE_PROTOCOL; default %d)", kernel.DefaultProtocol))
	fl.StringVar(&logLevel, "log-level", def("CALICO_LOG_LEVEL", "info"), "Log level: debug, info, warning, error (CALICO_LOG_LEVEL)")
	root.AddCommand(buildinfo.Command())
	root.AddCommand(newBPFCommand())
	root.SetContext(context.Background())
	return root
}

// flagValues are the flags that override startup's environment settings.
type flagValues struct {
	name, ip, ip6, as, ipMethod, ip6Method, backend string
	noPools                                         bool
	configPath, runDir, nodenameFile, etcdDataDir   string
}

// apply overrides cfg with the flags given on the command line.
func (f *flagValues) apply(cmd *cobra.Command, cfg *startup.Config) {
	set := func(flag string, dst *string, v string) {
		if cmd.Flags().Changed(flag) {
			*dst = v
		}
	}
	set("name", &cfg.NodeName, f.name)
	set("ip", &cfg.IP, f.ip)
	set("ip6", &cfg.IP6, f.ip6)
	set("as", &cfg.AS, f.as)
	set("ip-autodetection-method", &cfg.IPMethod, f.ipMethod)
	set("ip6-autodetection-method", &cfg.IP6Method, f.ip6Method)
	set("backend", &cfg.Backend, f.backend)
	set("nodename-file", &cfg.NodenameFile, f.nodenameFile)
	if cmd.Flags().Changed("no-default-ippools") {
		cfg.NoDefaultPools = f.noPools
	}
	f.runDir = filepath.Clean(f.runDir)
}

// routeProtocol reads the BGP route protocol number: empty for the
// default, else 5 to 255 (0 to 4 are the kernel's own and the operator's
// static routes).
func routeProtocol(s string) (uint8, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 5 || n > 255 {
		return 0, fmt.Errorf("--bgp-route-protocol (CALICO_BGP_ROUTE_PROTOCOL) %q: want a number from 5 to 255 (0-4 are the kernel's and static routes)", s)
	}
	if n == vxlan.RouteProtocol {
		// Both would own the same routes and remove each other's.
		return 0, fmt.Errorf("--bgp-route-protocol (CALICO_BGP_ROUTE_PROTOCOL) %q: protocol %d is felix's VXLAN overlay routes; choose another", s, n)
	}
	return uint8(n), nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// envBool reads a true/false environment variable (false when unset).
func envBool(getenv func(string) string, name string) (bool, error) {
	v := getenv(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.ToLower(v))
	if err != nil {
		return false, fmt.Errorf("%s %q: want true or false", name, v)
	}
	return b, nil
}
