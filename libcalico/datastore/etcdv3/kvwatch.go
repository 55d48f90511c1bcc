package etcdv3

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// WatchKV implements datastore.KVWatcher: one etcd watch stream of the
// keys under prefix from revision+1. The channel closes when ctx ends or
// the stream does (compaction, error); the caller then lists again.
func (s *Store) WatchKV(ctx context.Context, prefix string, revision int64) (<-chan datastore.KVEvent, error) {
	if prefix == "" {
		return nil, fmt.Errorf("watching raw keys needs a prefix")
	}
	out := make(chan datastore.KVEvent, watchBuffer)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	stream := s.client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(revision+1))
	go func() {
		defer close(out)
		defer cancel()
		for resp := range stream {
			if resp.CompactRevision != 0 || resp.Err() != nil {
				return
			}
			for _, ev := range resp.Events {
				e := datastore.KVEvent{Type: datastore.Modified, Pair: datastore.KVPair{
					Key: string(ev.Kv.Key), Value: ev.Kv.Value, Revision: ev.Kv.ModRevision,
				}}
				switch {
				case ev.Type == mvccpb.DELETE:
					e.Type, e.Pair.Value = datastore.Deleted, nil
				case ev.IsCreate():
					e.Type = datastore.Added
				}
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
