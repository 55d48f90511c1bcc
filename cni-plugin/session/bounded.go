package session

import (
	"context"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Bound wraps store so that each call is bounded by timeout on top of its
// context: a dead datastore fails one step quickly, however long the other
// steps of the invocation (running IPAM, building the veth) took.
func Bound(store datastore.Interface, timeout time.Duration) datastore.Interface {
	return bounded{store, timeout}
}

type bounded struct {
	datastore.Interface
	timeout time.Duration
}

func (b bounded) Create(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.Interface.Create(ctx, r)
}

func (b bounded) Update(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.Interface.Update(ctx, r)
}

func (b bounded) Apply(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.Interface.Apply(ctx, r)
}

func (b bounded) Delete(ctx context.Context, k datastore.Key, rv string) (v3.Resource, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.Interface.Delete(ctx, k, rv)
}

func (b bounded) Get(ctx context.Context, k datastore.Key) (v3.Resource, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.Interface.Get(ctx, k)
}

func (b bounded) List(ctx context.Context, opts datastore.ListOptions) ([]v3.Resource, string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.Interface.List(ctx, opts)
}

// ListWithBadValues is List that also returns the values it skipped,
// when the store can say (see datastore.BadValueLister).
func (b bounded) ListWithBadValues(ctx context.Context, opts datastore.ListOptions) ([]v3.Resource, []*datastore.BadValueError, string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if l, ok := b.Interface.(datastore.BadValueLister); ok {
		return l.ListWithBadValues(ctx, opts)
	}
	items, rev, err := b.Interface.List(ctx, opts)
	return items, nil, rev, err
}

// BadValues is the store's, when it keeps one.
func (b bounded) BadValues() *datastore.BadValues { return datastore.BadValuesOf(b.Interface) }

// BoundKV is Bound for the raw key-value view the IPAM allocator works on.
func BoundKV(kv datastore.KV, timeout time.Duration) datastore.KV {
	return boundedKV{kv, timeout}
}

type boundedKV struct {
	kv      datastore.KV
	timeout time.Duration
}

func (b boundedKV) Get(ctx context.Context, key string) (datastore.KVPair, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.kv.Get(ctx, key)
}

func (b boundedKV) List(ctx context.Context, prefix string) ([]datastore.KVPair, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.kv.List(ctx, prefix)
}

func (b boundedKV) Create(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.kv.Create(ctx, p)
}

func (b boundedKV) Update(ctx context.Context, p datastore.KVPair) (datastore.KVPair, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.kv.Update(ctx, p)
}

func (b boundedKV) Delete(ctx context.Context, key string, revision int64) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.kv.Delete(ctx, key, revision)
}

func (b boundedKV) Txn(ctx context.Context, conds []datastore.KVCond, ops []datastore.KVOp) (int64, []datastore.KVPair, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.kv.Txn(ctx, conds, ops)
}
