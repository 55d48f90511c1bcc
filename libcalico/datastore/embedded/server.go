package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// DefaultStartTimeout bounds how long Start waits for the server to be
// ready when Config.StartTimeout is zero.
const DefaultStartTimeout = 30 * time.Second

// Config describes the embedded server.
type Config struct {
	// Name of the member; "default" when empty.
	Name string
	// DataDir holds the member's data; required.
	DataDir string
	// ClientURLs to listen on for clients; a port of 0 picks a free one
	// before starting (read it back with Endpoints). Default
	// http://127.0.0.1:2379.
	ClientURLs []string
	// PeerURLs to listen on for peers. Default http://127.0.0.1:2380.
	PeerURLs []string
	// CertFile and KeyFile are the server certificate for https client
	// URLs; with ClientCAFile set, clients must present a certificate
	// signed by that CA.
	CertFile, KeyFile, ClientCAFile string
	// PeerCertFile and PeerKeyFile are the certificate for https peer
	// URLs; with PeerCAFile set, peers must present a certificate signed
	// by that CA.
	PeerCertFile, PeerKeyFile, PeerCAFile string
	// TickMs and ElectionMs are raft's heartbeat interval and election
	// timeout (etcd's defaults, 100 and 1000, when zero).
	TickMs, ElectionMs uint
	// UnsafeNoFsync trades durability for speed (tests only).
	UnsafeNoFsync bool
	// AuthTokenTTL is how long an idle auth token stays valid, in whole
	// seconds (etcd's default, 5 minutes, when zero).
	AuthTokenTTL time.Duration
	// StartTimeout bounds Start; DefaultStartTimeout when zero.
	StartTimeout time.Duration
}

// Server is a running embedded etcd.
type Server struct {
	etcd      *embed.Etcd
	endpoints []string
	closeOnce sync.Once
}

// parseURLs parses a list of URLs, or the default when it is empty.
func parseURLs(what string, raw []string, def string) ([]url.URL, error) {
	if len(raw) == 0 {
		raw = []string{def}
	}
	out := make([]url.URL, 0, len(raw))
	for _, r := range raw {
		u, err := url.Parse(r)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, r, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("%s %q: scheme must be http or https", what, r)
		}
		out = append(out, *u)
	}
	return out, nil
}

// etcdConfig turns our Config into etcd's.
func (c Config) etcdConfig() (*embed.Config, error) {
	if c.DataDir == "" {
		return nil, errors.New("embedded etcd: a data directory is required")
	}
	ec := embed.NewConfig()
	if c.Name != "" {
		ec.Name = c.Name
	}
	ec.Dir = c.DataDir
	clientURLs, err := parseURLs("client URL", c.ClientURLs, "http://127.0.0.1:2379")
	if err != nil {
		return nil, err
	}
	peerURLs, err := parseURLs("peer URL", c.PeerURLs, "http://127.0.0.1:2380")
	if err != nil {
		return nil, err
	}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = clientURLs, clientURLs
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = peerURLs, peerURLs
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	if c.TickMs != 0 {
		ec.TickMs = c.TickMs
	}
	if c.ElectionMs != 0 {
		ec.ElectionMs = c.ElectionMs
	}
	ec.UnsafeNoFsync = c.UnsafeNoFsync
	if c.AuthTokenTTL > 0 {
		ec.AuthTokenTTL = uint(max(c.AuthTokenTTL/time.Second, 1))
	}
	ec.ClientTLSInfo.CertFile = c.CertFile
	ec.ClientTLSInfo.KeyFile = c.KeyFile
	if c.ClientCAFile != "" {
		ec.ClientTLSInfo.TrustedCAFile = c.ClientCAFile
		ec.ClientTLSInfo.ClientCertAuth = true
	}
	ec.PeerTLSInfo.CertFile = c.PeerCertFile
	ec.PeerTLSInfo.KeyFile = c.PeerKeyFile
	if c.PeerCAFile != "" {
		ec.PeerTLSInfo.TrustedCAFile = c.PeerCAFile
		ec.PeerTLSInfo.ClientCertAuth = true
	}
	// The JSON gateway (POST /v3/kv/...) is what the CNI plugins' lean
	// client speaks; it is etcd's default, set here so it stays on.
	ec.EnableGRPCGateway = true
	ec.Logger = "zap"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	return ec, nil
}

// portPicks bounds the attempts at starting on picked ports, one of
// which another process may take between the pick and etcd's bind.
const portPicks = 3

// Start runs an etcd member and waits until it serves clients.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	ec, err := cfg.etcdConfig()
	if err != nil {
		return nil, err
	}
	// Client URLs are listened on and advertised as configured.
	configured := ec.ListenClientUrls
	var e *embed.Etcd
	for attempt := 1; ; attempt++ {
		urls, picked, err := pickFreePorts(configured)
		if err != nil {
			return nil, fmt.Errorf("embedded etcd in %s: %w", cfg.DataDir, err)
		}
		ec.ListenClientUrls, ec.AdvertiseClientUrls = urls, urls
		e, err = embed.StartEtcd(ec)
		if err == nil {
			break
		}
		if !picked || attempt == portPicks || !strings.Contains(err.Error(), "address already in use") {
			return nil, fmt.Errorf("embedded etcd in %s: starting: %w", cfg.DataDir, err)
		}
	}
	s := &Server{etcd: e}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		s.Close()
		return nil, fmt.Errorf("embedded etcd in %s: %w", cfg.DataDir, err)
	case <-timer.C:
		s.Close()
		return nil, fmt.Errorf("embedded etcd in %s: not ready within %s", cfg.DataDir, timeout)
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("embedded etcd in %s: %w", cfg.DataDir, ctx.Err())
	}
	for _, l := range e.Clients {
		s.endpoints = append(s.endpoints, schemeOf(l.Addr().String(), ec.ListenClientUrls)+"://"+l.Addr().String())
	}
	log.WithFields(log.Fields{"endpoints": strings.Join(s.endpoints, ","), "dataDir": cfg.DataDir}).Debug("Embedded etcd is serving")
	return s, nil
}

// pickFreePorts returns urls with port 0 replaced by a free port, and
// whether it replaced any: etcd's JSON gateway reaches the gRPC server at
// the configured address, so with port 0 it would dial port 0.
func pickFreePorts(urls []url.URL) ([]url.URL, bool, error) {
	out := make([]url.URL, len(urls))
	picked := false
	for i, u := range urls {
		out[i] = u
		if u.Port() != "0" {
			continue
		}
		l, err := net.Listen("tcp", u.Host)
		if err != nil {
			return nil, false, fmt.Errorf("picking a free port for client URL %s: %w", u.String(), err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		out[i].Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
		picked = true
	}
	return out, picked, nil
}

// schemeOf finds the scheme of the URL a listener was opened for: the URL
// with the same host and port, else (port 0) the first with the same host.
func schemeOf(addr string, urls []url.URL) string {
	for _, u := range urls {
		if u.Host == addr {
			return u.Scheme
		}
	}
	host, _, _ := strings.Cut(addr, ":")
	for _, u := range urls {
		if u.Hostname() == host {
			return u.Scheme
		}
	}
	return urls[0].Scheme
}

// Endpoints are the client URLs the server really listens on (with the
// ports picked for port 0).
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Err reports a fatal error of the running server.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the server; calling it again is harmless.
func (s *Server) Close() {
	s.closeOnce.Do(s.etcd.Close)
}
