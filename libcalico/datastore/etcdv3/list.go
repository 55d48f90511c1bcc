package etcdv3

import (
	"context"
	"fmt"

	log "github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// List reads what opts selects in one range request and decodes it.
func (s *Store) List(ctx context.Context, opts datastore.ListOptions) ([]v3.Resource, string, error) {
	path, prefix, err := datastore.ListPath(opts)
	if err != nil {
		return nil, "", err
	}
	var ops []clientv3.OpOption
	if prefix {
		ops = append(ops, clientv3.WithPrefix())
	}
	resp, err := s.client.Get(ctx, path, ops...)
	if err != nil {
		return nil, "", fmt.Errorf("listing %s: %w", path, err)
	}
	items, err := s.decodeAll(opts.Kind, resp.Kvs)
	if err != nil {
		return nil, "", err
	}
	return items, revString(resp.Header.Revision), nil
}

// decodeAll decodes a range result. With a kind, every key must be of that
// kind; without one (a list of everything), keys of kinds this build does
// not know are skipped.
func (s *Store) decodeAll(kind string, kvs []*mvccpb.KeyValue) ([]v3.Resource, error) {
	items := make([]v3.Resource, 0, len(kvs))
	var info v3.KindInfo
	if kind != "" {
		var ok bool
		if info, ok = v3.KindByName(kind); !ok {
			return nil, fmt.Errorf("kind %q is not a known resource kind", kind)
		}
	}
	for _, kv := range kvs {
		var obj v3.Resource
		var err error
		if kind != "" {
			obj, err = s.codec.DecodeKind(info, string(kv.Key), kv.Value, kv.ModRevision)
		} else {
			if _, _, perr := s.codec.ParseKey(string(kv.Key)); perr != nil {
				log.WithField("key", string(kv.Key)).WithError(perr).Debug("Skipping key of an unknown kind")
				continue
			}
			obj, err = s.codec.Decode(string(kv.Key), kv.Value, kv.ModRevision)
		}
		if err != nil {
			return nil, err
		}
		items = append(items, obj)
	}
	return items, nil
}
