// Command calico-etcd-proxy is Palisade's fan-out cache: etcd's gRPC
// proxy in front of the cluster's etcd, for a group of calico-node agents
// that reach it as their ETCD_ENDPOINTS (see package etcdproxy and
// docs/install.md). The upstream etcd and the proxy's credentials there
// are read as calico-node reads them (ETCD_ENDPOINTS, ETCD_CA_CERT_FILE,
// ETCD_CERT_FILE, ETCD_KEY_FILE, or a CalicoAPIConfig file).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	log "github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/libcalico/apiconfig"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdproxy"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "calico-etcd-proxy:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var cfg etcdproxy.Config
	var configFile string
	root := &cobra.Command{
		Use:   "calico-etcd-proxy",
		Short: "Serve etcd to a group of calico-node agents over one etcd connection",
		Long: `calico-etcd-proxy runs etcd's gRPC proxy in front of the cluster's etcd:
the agents that name it in ETCD_ENDPOINTS share its watches (one etcd watch
per range for all of them) and their reads and writes pass through it.
It reads the upstream etcd as calico-node does (ETCD_ENDPOINTS, ETCD_*
certificate files, or --config). It requires TLS with client certificates
unless it listens on a loopback address.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			up, err := apiconfig.Load(configFile, os.Getenv)
			if err != nil {
				return err
			}
			cfg.Upstream = up
			ctx, cancel := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer cancel()
			return run(ctx, cfg)
		},
	}
	f := root.Flags()
	f.StringVar(&cfg.Listen, "listen-addr", "127.0.0.1:23790", "address the agents connect to (host:port)")
	f.StringVar(&cfg.CertFile, "cert-file", os.Getenv("PROXY_CERT_FILE"), "the proxy's server certificate (PROXY_CERT_FILE)")
	f.StringVar(&cfg.KeyFile, "key-file", os.Getenv("PROXY_KEY_FILE"), "the server certificate's key (PROXY_KEY_FILE)")
	f.StringVar(&cfg.ClientCAFile, "trusted-ca-file", os.Getenv("PROXY_TRUSTED_CA_FILE"), "CA of the client certificates the proxy accepts (PROXY_TRUSTED_CA_FILE)")
	f.IntVar(&cfg.MaxRanges, "max-concurrent-reads", etcdproxy.DefaultMaxRanges, "reads forwarded to etcd at once (more wait): bounds the proxy's memory when every agent lists at once")
	f.StringVar(&configFile, "config", apiconfig.DefaultPath, "CalicoAPIConfig file naming the upstream etcd (the environment overrides it)")
	root.AddCommand(buildinfo.Command())
	return root
}

func run(ctx context.Context, cfg etcdproxy.Config) error {
	s, err := etcdproxy.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Stop()
	log.WithFields(log.Fields{"listen": s.Addr().String(), "upstream": cfg.Upstream.EndpointList()}).Info("etcd proxy serving")
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.Done():
		return err
	}
}
