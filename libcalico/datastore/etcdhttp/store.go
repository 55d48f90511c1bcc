package etcdhttp

import (
	"context"
	"errors"
	"fmt"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdcore"
)

// Config says how to reach etcd: the same settings as etcdv3.Config.
type Config = etcdcore.Config

// ErrWatchUnsupported is what Watch returns: the gateway streams watches
// in a way this client does not speak.
var ErrWatchUnsupported = errors.New("watch is not supported by the lean client (etcdhttp); use etcdv3")

// core is embedded unexported so that its methods, not the field, are
// part of Store's API.
type core = etcdcore.Store

// Store is a connection to etcd through its JSON gateway. It implements
// datastore.Interface (Watch always fails with ErrWatchUnsupported); KV
// returns its raw key-value view. It is safe for concurrent use.
type Store struct {
	*core
	tr *transport
}

var _ datastore.Interface = (*Store)(nil)

// New prepares the client and checks within cfg.DialTimeout (5 s by
// default, in total) that etcd authenticates it when a username is set
// and answers a read, so an unreachable or misconfigured etcd fails here
// with an error naming the endpoints.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints configured")
	}
	tr, err := newTransport(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", cfg.EndpointList(), err)
	}
	probeCtx, cancel := context.WithTimeout(ctx, cfg.Timeout())
	defer cancel()
	if err := probe(probeCtx, tr); err != nil {
		_ = tr.Close()
		if probeCtx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("etcd at %s: no answer within %s: %w", cfg.EndpointList(), cfg.Timeout(), err)
		}
		return nil, fmt.Errorf("etcd at %s: %w", cfg.EndpointList(), err)
	}
	log.WithField("endpoints", cfg.EndpointList()).Debug("Connected to etcd through its gateway")
	return &Store{core: etcdcore.NewStore(tr), tr: tr}, nil
}

// Open prepares the client without a request: the first request
// connects (and authenticates first when a username is set), so a
// process that makes only a few requests pays no round trip for a check.
// Open fails only on a configuration it cannot use; an unreachable etcd
// shows up as the first request's error, matching
// datastore.ErrUnavailable and naming the endpoint.
func Open(cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints configured")
	}
	tr, err := newTransport(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", cfg.EndpointList(), err)
	}
	tr.lazyAuth = tr.user != ""
	return &Store{core: etcdcore.NewStore(tr), tr: tr}, nil
}

// probe authenticates when a username is set and reads one key. A user
// allowed to read only some keys is still connected.
func probe(ctx context.Context, tr *transport) error {
	if tr.user != "" {
		if err := tr.authenticate(ctx); err != nil {
			return err
		}
	}
	_, err := tr.Range(ctx, datastore.ResourcePrefix, false)
	var ee *etcdError
	if errors.As(err, &ee) && ee.Code == codePermissionDenied {
		return nil
	}
	return err
}

// Watch is not supported by this client.
func (s *Store) Watch(context.Context, datastore.ListOptions, string) (datastore.Watcher, error) {
	return nil, ErrWatchUnsupported
}
