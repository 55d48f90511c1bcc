package datastore

import "context"

// KVEvent is one change of a raw key seen by a KV watch: Type is Added,
// Modified or Deleted (Pair.Value then nil); Pair.Revision is the key's
// mod revision, or for a deletion the revision it was deleted at.
type KVEvent struct {
	Type EventType
	Pair KVPair
}

// KVWatcher follows raw keys (IPAM blocks, for felix). The etcd v3 store
// implements it.
type KVWatcher interface {
	// WatchKV reports every change under prefix after revision (the
	// revision a KV.List of the same prefix returned), in order, until
	// ctx ends or the stream breaks (a compaction, etcd gone): then the
	// channel is closed, and the caller lists again and watches from
	// there.
	WatchKV(ctx context.Context, prefix string, revision int64) (<-chan KVEvent, error)
}
