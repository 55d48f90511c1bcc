package etcdv3

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdcore"
)

// grpcTransport is etcdcore.Transport over etcd's gRPC client.
type grpcTransport struct {
	client *clientv3.Client
}

var _ etcdcore.Transport = grpcTransport{}

// Range reads key, or every key under it.
func (t grpcTransport) Range(ctx context.Context, key string, prefix bool) (etcdcore.RangeResult, error) {
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := t.client.Get(ctx, key, opts...)
	if err != nil {
		return etcdcore.RangeResult{}, err
	}
	return etcdcore.RangeResult{KVs: keyValues(resp.Kvs), Revision: resp.Header.Revision}, nil
}

// RangePage reads one page of a range at a fixed revision.
func (t grpcTransport) RangePage(ctx context.Context, from, end string, rev, limit int64) (etcdcore.RangeResult, bool, error) {
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := t.client.Get(ctx, from, opts...)
	if err != nil {
		return etcdcore.RangeResult{}, false, err
	}
	return etcdcore.RangeResult{KVs: keyValues(resp.Kvs), Revision: resp.Header.Revision}, resp.More, nil
}

// Txn runs one etcd transaction.
func (t grpcTransport) Txn(ctx context.Context, cmps []etcdcore.Compare, then, els []etcdcore.Op) (etcdcore.TxnResult, error) {
	ccmps := make([]clientv3.Cmp, len(cmps))
	for i, c := range cmps {
		cmp, err := compare(c)
		if err != nil {
			return etcdcore.TxnResult{}, err
		}
		ccmps[i] = cmp
	}
	resp, err := t.client.Txn(ctx).If(ccmps...).Then(ops(then)...).Else(ops(els)...).Commit()
	if err != nil {
		return etcdcore.TxnResult{}, err
	}
	out := etcdcore.TxnResult{Succeeded: resp.Succeeded, Revision: resp.Header.Revision, Results: make([]etcdcore.OpResult, len(resp.Responses))}
	for i, r := range resp.Responses {
		switch {
		case r.GetResponseRange() != nil:
			out.Results[i].KVs = keyValues(r.GetResponseRange().Kvs)
		case r.GetResponseDeleteRange() != nil:
			d := r.GetResponseDeleteRange()
			out.Results[i] = etcdcore.OpResult{KVs: keyValues(d.PrevKvs), Deleted: d.Deleted}
		}
	}
	return out, nil
}

// Close closes the client.
func (t grpcTransport) Close() error { return t.client.Close() }

// compare turns a condition into clientv3's.
func compare(c etcdcore.Compare) (clientv3.Cmp, error) {
	var cmp clientv3.Cmp
	var op string
	switch c.Result {
	case etcdcore.Equal:
		op = "="
	case etcdcore.Greater:
		op = ">"
	case etcdcore.Less:
		op = "<"
	default:
		return cmp, fmt.Errorf("transaction condition on %q: unknown relation %d", c.Key, c.Result)
	}
	switch c.Target {
	case etcdcore.CreateRevision:
		cmp = clientv3.Compare(clientv3.CreateRevision(c.Key), op, c.Revision)
	case etcdcore.ModRevision:
		cmp = clientv3.Compare(clientv3.ModRevision(c.Key), op, c.Revision)
	default:
		return cmp, fmt.Errorf("transaction condition on %q: unknown target %d", c.Key, c.Target)
	}
	if c.Prefix {
		cmp = cmp.WithPrefix()
	}
	return cmp, nil
}

// ops turns operations into clientv3's.
func ops(in []etcdcore.Op) []clientv3.Op {
	out := make([]clientv3.Op, len(in))
	for i, o := range in {
		switch o.Kind {
		case etcdcore.Put:
			out[i] = clientv3.OpPut(o.Key, string(o.Value))
		case etcdcore.Delete:
			if o.PrevKV {
				out[i] = clientv3.OpDelete(o.Key, clientv3.WithPrevKV())
			} else {
				out[i] = clientv3.OpDelete(o.Key)
			}
		default:
			if o.KeysOnly {
				out[i] = clientv3.OpGet(o.Key, clientv3.WithKeysOnly())
			} else {
				out[i] = clientv3.OpGet(o.Key)
			}
		}
	}
	return out
}

// keyValues converts etcd's key-values, sharing their value bytes.
func keyValues(kvs []*mvccpb.KeyValue) []etcdcore.KeyValue {
	out := make([]etcdcore.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = etcdcore.KeyValue{Key: string(kv.Key), Value: kv.Value, ModRevision: kv.ModRevision}
	}
	return out
}
