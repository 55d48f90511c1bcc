package etcdv3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdcore"
)

// Config says how to reach etcd.
type Config = etcdcore.Config

// DefaultDialTimeout bounds how long New waits for etcd to answer.
const DefaultDialTimeout = etcdcore.DefaultDialTimeout

// MaxBatch is the most writes one WriteBatch takes: etcd refuses
// transactions of more than 128 operations by default.
const MaxBatch = etcdcore.MaxBatch

// KV is the raw key-value view of a Store (Store.KV), for IPAM.
type KV = etcdcore.KV

// reconnect is how the client dials etcd again after losing it: quickly at
// first, then at most every second however long etcd has been away
// (gRPC's default grows to two minutes, so after an outage of a minute or
// two watches came back only tens of seconds after etcd did). An attempt
// gives up after two seconds, so a connection that etcd accepted but
// never answered (a frozen process, lost packets) is retried rather than
// waited on.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
}

// core is embedded unexported so that its methods, not the field, are
// part of Store's API.
type core = etcdcore.Store

// Store is a connection to etcd over its gRPC client. It implements
// datastore.Interface: the resource and KV rules come from etcdcore, Watch
// and Client from here; KV returns its raw key-value view. It is safe for
// concurrent use.
type Store struct {
	*core
	client *clientv3.Client
}

var _ datastore.Interface = (*Store)(nil)

// New connects to etcd and checks within cfg.DialTimeout (5 s by default,
// in total) that it answers a read, so an unreachable or misconfigured etcd
// fails here with an error naming the endpoints instead of hanging later.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints configured")
	}
	timeout := cfg.Timeout()
	probeCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	tlsCfg, err := cfg.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", cfg.EndpointList(), err)
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		Username:             cfg.Username,
		Password:             cfg.Password,
		TLS:                  tlsCfg,
		DialTimeout:          timeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
		DialOptions:          []grpc.DialOption{grpc.WithConnectParams(reconnect)},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: connecting: %w", cfg.EndpointList(), err)
	}
	// clientv3.New does not wait for a connection: read one key, bounded.
	// Meanwhile dial the endpoints ourselves, since gRPC reports only a
	// deadline when it cannot get through, and give up at once when every
	// endpoint rejects our TLS settings.
	if err := probe(ctx, probeCtx, cancel, client, cfg, tlsCfg); err != nil {
		_ = client.Close()
		return nil, err
	}
	log.WithField("endpoints", cfg.EndpointList()).Debug("Connected to etcd")
	return &Store{core: etcdcore.NewStore(grpcTransport{client: client}), client: client}, nil
}

// Client is the underlying etcd client, for tools that need etcd itself
// (compaction, status, benchmarks).
func (s *Store) Client() *clientv3.Client { return s.client }

// probe reads one key within probeCtx and explains a failure.
func probe(ctx, probeCtx context.Context, cancel context.CancelFunc, client *clientv3.Client, cfg Config, tlsCfg *tls.Config) error {
	got := make(chan error, 1)
	go func() {
		_, err := client.Get(probeCtx, datastore.ResourcePrefix)
		got <- err
	}()
	diagCh := make(chan diagnosis, 1)
	go func() { diagCh <- diagnose(probeCtx, cfg.Endpoints, tlsCfg) }()

	var err error
	var diag *diagnosis
	select {
	case err = <-got:
	case d := <-diagCh:
		diag = &d
		if d.fatal {
			cancel()
			<-got
			return fmt.Errorf("etcd at %s: %s", cfg.EndpointList(), d.problems)
		}
		err = <-got
	}
	if err == nil || errors.Is(err, rpctypes.ErrPermissionDenied) {
		return nil
	}
	if probeCtx.Err() == nil || ctx.Err() != nil {
		return fmt.Errorf("etcd at %s: %w", cfg.EndpointList(), err)
	}
	if diag == nil {
		d := <-diagCh
		diag = &d
	}
	why := ""
	if diag.problems != "" {
		why = " (" + diag.problems + ")"
	}
	return fmt.Errorf("etcd at %s: no answer within %s%s: %w", cfg.EndpointList(), cfg.Timeout(), why, err)
}
