// Package etcdproxy is Palisade's fan-out cache: etcd's own gRPC proxy
// (go.etcd.io/etcd/server/v3/proxy/grpcproxy) served to a group of
// agents over one upstream etcd connection. Agents reach it as they reach
// etcd (ETCD_ENDPOINTS and their etcd client certificates); it merges
// their watches of the same range into one etcd watch and answers their
// reads and writes by forwarding them. It listens with TLS and requires
// a client certificate signed by the CA it is given, as etcd does; only
// on a loopback address may it listen in the clear.
package etcdproxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdcore"
)

// Config says where the proxy listens and which etcd it serves.
type Config struct {
	// Listen is the address agents connect to, host:port.
	Listen string
	// Upstream is the etcd the proxy forwards to, with the client
	// credentials it uses there (the agents' own, in the manifest).
	Upstream etcdcore.Config
	// CertFile and KeyFile are the proxy's server certificate;
	// ClientCAFile the CA whose client certificates it accepts. All three
	// are required unless Listen is a loopback address.
	CertFile, KeyFile, ClientCAFile string
	// MaxRanges bounds the reads forwarded to etcd at once
	// (DefaultMaxRanges when 0); the others wait their turn.
	MaxRanges int
}

// DefaultMaxRanges is how many reads the proxy forwards at once. When
// every agent starts together each lists the whole datastore; forwarded
// all at once, the proxy held every answer in memory together (2.6 GiB
// per proxy of 500 agents at 1,000 nodes, docs/scale.md), while etcd
// answers them no faster.
const DefaultMaxRanges = 16

// limitRanges lets at most n KV Range calls run at once.
func limitRanges(n int) grpc.UnaryServerInterceptor {
	slots := make(chan struct{}, n)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != pb.KV_Range_FullMethodName {
			return handler(ctx, req)
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-slots }()
		return handler(ctx, req)
	}
}

// Server is a running proxy.
type Server struct {
	grpc     *grpc.Server
	lis      net.Listener
	client   *clientv3.Client
	served   chan error
	stopOnce bool
}

// Start connects to the upstream etcd, checks that it answers, and
// serves the proxy on cfg.Listen until Stop.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	creds, err := serverCredentials(cfg)
	if err != nil {
		return nil, err
	}
	if len(cfg.Upstream.Endpoints) == 0 {
		return nil, errors.New("etcd proxy: no upstream etcd endpoints")
	}
	upTLS, err := cfg.Upstream.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd proxy: upstream etcd at %s: %w", cfg.Upstream.EndpointList(), err)
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Upstream.Endpoints,
		Username:             cfg.Upstream.Username,
		Password:             cfg.Upstream.Password,
		TLS:                  upTLS,
		DialTimeout:          cfg.Upstream.Timeout(),
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd proxy: upstream etcd at %s: %w", cfg.Upstream.EndpointList(), err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.Upstream.Timeout())
	_, err = client.Get(pctx, "/calico/", clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	cancel()
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("etcd proxy: upstream etcd at %s does not answer: %w", cfg.Upstream.EndpointList(), err)
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("etcd proxy: listening on %s: %w", cfg.Listen, err)
	}
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(math.MaxUint32),
		// Agents' etcd clients ping every 10 s (etcd's own servers
		// allow one every 5 s); gRPC's default policy would hang up on
		// them.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(10 << 20),
		grpc.ChainUnaryInterceptor(limitRanges(cmp.Or(cfg.MaxRanges, DefaultMaxRanges))),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	g := grpc.NewServer(opts...)
	lg := zap.NewNop()
	kvp, _ := grpcproxy.NewKvProxy(client)
	watchp, _ := grpcproxy.NewWatchProxy(client.Ctx(), lg, client)
	clusterp, _ := grpcproxy.NewClusterProxy(lg, client, "", "")
	leasep, _ := grpcproxy.NewLeaseProxy(client.Ctx(), client)
	pb.RegisterKVServer(g, kvp)
	pb.RegisterWatchServer(g, watchp)
	pb.RegisterClusterServer(g, clusterp)
	pb.RegisterLeaseServer(g, leasep)
	pb.RegisterMaintenanceServer(g, grpcproxy.NewMaintenanceProxy(client))
	pb.RegisterAuthServer(g, grpcproxy.NewAuthProxy(client))
	s := &Server{grpc: g, lis: lis, client: client, served: make(chan error, 1)}
	go func() { s.served <- g.Serve(lis) }()
	return s, nil
}

// Addr is the address the proxy listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Done is closed, with the error, when the server stops serving.
func (s *Server) Done() <-chan error { return s.served }

// Stop closes every agent's connection and the upstream one.
func (s *Server) Stop() {
	if s.stopOnce {
		return
	}
	s.stopOnce = true
	s.grpc.Stop()
	_ = s.client.Close()
}

// serverCredentials are the listener's TLS settings: the server
// certificate and a required client certificate from the client CA; nil
// (no TLS) only on a loopback address with none of the three given.
func serverCredentials(cfg Config) (credentials.TransportCredentials, error) {
	if cfg.CertFile == "" && cfg.KeyFile == "" && cfg.ClientCAFile == "" {
		host, _, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("etcd proxy: listen address %q: %w", cfg.Listen, err)
		}
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			return nil, nil
		}
		return nil, fmt.Errorf("etcd proxy: listening on %s needs TLS: give the server certificate, its key and the CA of the agents' client certificates (only a loopback address may be served in the clear)", cfg.Listen)
	}
	if cfg.CertFile == "" || cfg.KeyFile == "" || cfg.ClientCAFile == "" {
		return nil, fmt.Errorf("etcd proxy: TLS needs a certificate, its key and a client CA (got cert %q, key %q, client CA %q)", cfg.CertFile, cfg.KeyFile, cfg.ClientCAFile)
	}
	pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("etcd proxy: loading certificate %q with key %q: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	ca, err := os.ReadFile(cfg.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("etcd proxy: reading the client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("etcd proxy: client CA %q holds no PEM certificate", cfg.ClientCAFile)
	}
	return credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}), nil
}
