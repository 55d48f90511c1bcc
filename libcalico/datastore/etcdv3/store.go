package etcdv3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Store is a connection to etcd. It implements datastore.Interface; KV
// returns its raw key-value view. It is safe for concurrent use.
type Store struct {
	client    *clientv3.Client
	codec     *datastore.Codec
	endpoints string
	closeOnce sync.Once
	closeErr  error
}

var _ datastore.Interface = (*Store)(nil)

// New connects to etcd and checks within cfg.DialTimeout (5 s by default,
// in total) that it answers a read, so an unreachable or misconfigured etcd
// fails here with an error naming the endpoints instead of hanging later.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints configured")
	}
	timeout := cfg.dialTimeout()
	probeCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", cfg.endpointList(), err)
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
	})
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: connecting: %w", cfg.endpointList(), err)
	}
	// clientv3.New does not wait for a connection: read one key, bounded.
	// Meanwhile dial the endpoints ourselves, since gRPC reports only a
	// deadline when it cannot get through, and give up at once when every
	// endpoint rejects our TLS settings.
	if err := probe(ctx, probeCtx, cancel, client, cfg, tlsCfg); err != nil {
		_ = client.Close()
		return nil, err
	}
	log.WithField("endpoints", cfg.endpointList()).Debug("Connected to etcd")
	return &Store{client: client, codec: datastore.NewCodec(), endpoints: cfg.endpointList()}, nil
}

// Client is the underlying etcd client, for tools that need etcd itself
// (compaction, status, benchmarks).
func (s *Store) Client() *clientv3.Client { return s.client }

// Close closes the connection; calling it again is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.client.Close()
		if errors.Is(s.closeErr, context.Canceled) {
			s.closeErr = nil
		}
	})
	return s.closeErr
}

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
			return fmt.Errorf("etcd at %s: %s", cfg.endpointList(), d.problems)
		}
		err = <-got
	}
	if err == nil || errors.Is(err, rpctypes.ErrPermissionDenied) {
		return nil
	}
	if probeCtx.Err() == nil || ctx.Err() != nil {
		return fmt.Errorf("etcd at %s: %w", cfg.endpointList(), err)
	}
	if diag == nil {
		d := <-diagCh
		diag = &d
	}
	why := ""
	if diag.problems != "" {
		why = " (" + diag.problems + ")"
	}
	return fmt.Errorf("etcd at %s: no answer within %s%s: %w", cfg.endpointList(), cfg.dialTimeout(), why, err)
}
