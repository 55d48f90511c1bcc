package agent

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore/embedded"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdpki"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/node/startup"
)

// EtcdTLSDir is the directory, inside the embedded etcd's data directory,
// of its CA and certificates.
const EtcdTLSDir = "tls"

// startEmbedded serves the embedded etcd on the node's IPv4 address and
// loopback (or the configured URLs): TLS with client certificates signed
// by its own CA unless o.EtcdPlaintext, and writes the join file other
// nodes and calicoctl use. It returns how the agent itself reaches it.
func startEmbedded(ctx context.Context, o Options, cfg *startup.Config, host startup.Host) (*embedded.Server, etcdv3.Config, error) {
	scheme := "https"
	if o.EtcdPlaintext {
		scheme = "http"
	}
	clientURLs := o.EtcdClientURLs
	if len(clientURLs) == 0 {
		clientURLs = []string{scheme + "://" + netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), EtcdClientPort).String()}
		addr, err := startup.ResolveAddress(ctx, host, cfg.IP, cfg.IPMethod, false, "")
		if err != nil {
			return nil, etcdv3.Config{}, fmt.Errorf("choosing the embedded etcd's address: %w", err)
		}
		if a := addr.Prefix.Addr(); addr.Prefix.IsValid() && !a.IsLoopback() {
			clientURLs = append([]string{scheme + "://" + netip.AddrPortFrom(a, EtcdClientPort).String()}, clientURLs...)
		}
	}
	peerURLs := o.EtcdPeerURLs
	if len(peerURLs) == 0 {
		peerURLs = []string{scheme + "://127.0.0.1:" + strconv.Itoa(EtcdPeerPort)}
	}
	hosts := []string{cfg.NodeName}
	for _, list := range []struct {
		what string
		urls []string
	}{{"CALICO_ETCD_CLIENT_URLS", clientURLs}, {"CALICO_ETCD_PEER_URLS", peerURLs}} {
		for _, raw := range list.urls {
			u, err := url.Parse(raw)
			if err != nil || u.Host == "" {
				return nil, etcdv3.Config{}, fmt.Errorf("%s %q: not a URL", list.what, raw)
			}
			if u.Scheme != scheme {
				if o.EtcdPlaintext {
					return nil, etcdv3.Config{}, fmt.Errorf("%s %q: CALICO_ETCD_PLAINTEXT=true serves plain HTTP, so every URL must be http://", list.what, raw)
				}
				return nil, etcdv3.Config{}, fmt.Errorf("%s %q: the embedded etcd serves TLS with client certificates, so every URL must be https:// (plain HTTP, open to anyone who reaches it, needs CALICO_ETCD_PLAINTEXT=true)", list.what, raw)
			}
			hosts = append(hosts, u.Hostname())
		}
	}
	dataDir := o.EtcdDataDir
	if dataDir == "" {
		dataDir = DefaultEtcdDataDir
	}
	joinPath := o.EtcdJoinFile
	if joinPath == "" {
		joinPath = filepath.Join(dataDir, etcdpki.JoinFileName)
	}
	logger := log.WithFields(log.Fields{"clientURLs": clientURLs, "dataDir": dataDir})
	ecfg := embedded.Config{Name: cfg.NodeName, DataDir: dataDir, ClientURLs: clientURLs, PeerURLs: peerURLs}
	var files *etcdpki.Files
	if o.EtcdPlaintext {
		logger.Warn("Serving the embedded etcd over plain HTTP (CALICO_ETCD_PLAINTEXT): anyone who reaches it can read and change every resource")
	} else {
		res, err := etcdpki.Ensure(filepath.Join(dataDir, EtcdTLSDir), hosts, time.Now())
		if err != nil {
			return nil, etcdv3.Config{}, fmt.Errorf("embedded etcd: %w", err)
		}
		f := res.Files
		files = &f
		if res.NewCA {
			logger.WithField("ca", f.CA).Info("Made a CA for the embedded etcd; nodes and calicoctl join with the join file")
		} else if res.NewServer {
			logger.WithField("hosts", hosts).Info("Issued the embedded etcd's server certificate for its addresses")
		}
		ecfg.CertFile, ecfg.KeyFile, ecfg.ClientCAFile = f.ServerCert, f.ServerKey, f.CA
		ecfg.PeerCertFile, ecfg.PeerKeyFile, ecfg.PeerCAFile = f.ServerCert, f.ServerKey, f.CA
	}
	logger.Info("No etcd endpoint configured: serving the embedded etcd")
	srv, err := embedded.Start(ctx, ecfg)
	if err != nil {
		return nil, etcdv3.Config{}, fmt.Errorf("starting the embedded etcd in %s on %v: %w", dataDir, clientURLs, err)
	}
	var others, local []string
	for _, ep := range srv.Endpoints() {
		u, err := url.Parse(ep)
		if a, aerr := netip.ParseAddr(u.Hostname()); err == nil && aerr == nil && a.IsLoopback() {
			local = append(local, ep)
		} else {
			others = append(others, ep)
		}
	}
	if len(others) == 0 {
		others = local
	}
	if len(local) == 0 {
		local = others
	}
	if err := etcdpki.WriteJoin(joinPath, others, files); err != nil {
		srv.Close()
		return nil, etcdv3.Config{}, fmt.Errorf("embedded etcd: %w", err)
	}
	logger.WithFields(log.Fields{"endpoints": others, "joinFile": joinPath}).Info("Embedded etcd serving; other nodes and calicoctl use the join file")
	own := etcdv3.Config{Endpoints: local[:1]}
	if files != nil {
		own.CACertFile, own.CertFile, own.KeyFile = files.CA, files.ClientCert, files.ClientKey
	}
	return srv, own, nil
}
