package kubecontrollers

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/palisade-net/palisade/kube-controllers/controllers"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// scanPage is how many keys one page of a raw scan reads.
const scanPage = 1000

// etcdRaw is controllers.RawStore over the etcd client.
type etcdRaw struct{ c *clientv3.Client }

var _ controllers.RawStore = etcdRaw{}

// Scan implements controllers.RawStore.
func (r etcdRaw) Scan(ctx context.Context, prefix string, fn func(datastore.KVPair)) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from, rev := prefix, int64(0)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(scanPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := r.c.Get(ctx, from, opts...)
		if err != nil {
			return 0, fmt.Errorf("scanning %s: %w", prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			fn(datastore.KVPair{Key: string(kv.Key), Value: kv.Value, Revision: kv.ModRevision})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Watch implements controllers.RawStore.
func (r etcdRaw) Watch(ctx context.Context, prefix string, revision int64, fn func(controllers.RawEvent)) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range r.c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(revision+1), clientv3.WithPrevKV()) {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			return fmt.Errorf("watching %s from revision %d: %w", prefix, revision+1, datastore.ErrCompacted)
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watching %s: %w", prefix, err)
		}
		for _, ev := range resp.Events {
			e := controllers.RawEvent{Deleted: ev.Type == mvccpb.DELETE,
				KV: datastore.KVPair{Key: string(ev.Kv.Key), Value: ev.Kv.Value, Revision: ev.Kv.ModRevision}}
			if ev.PrevKv != nil {
				e.Prev = datastore.KVPair{Key: string(ev.PrevKv.Key), Value: ev.PrevKv.Value, Revision: ev.PrevKv.ModRevision}
			}
			fn(e)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("watching %s: the stream ended", prefix)
}
