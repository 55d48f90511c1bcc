package etcdcore

import "context"

// Transport is the part of etcd's KV API the store needs: a range read and
// a transaction. Implementations return etcd's own errors unwrapped (the
// store adds what the request was about) and must be safe for concurrent
// use.
type Transport interface {
	// Range reads key, or every key under it with prefix, sorted by key,
	// at the current revision.
	Range(ctx context.Context, key string, prefix bool) (RangeResult, error)
	// Txn runs then when every compare holds, otherwise els, atomically.
	Txn(ctx context.Context, cmps []Compare, then, els []Op) (TxnResult, error)
	// Close releases the connection.
	Close() error
}

// PagedRanger is implemented by transports that can read a range in
// pages at a fixed revision, which lets List decode one page while the
// next is on its way.
type PagedRanger interface {
	// RangePage reads at most limit keys in [from, end) at revision rev
	// (the current one when 0), sorted by key, and says whether more
	// keys follow.
	RangePage(ctx context.Context, from, end string, rev, limit int64) (RangeResult, bool, error)
}

// KeyValue is one stored key as etcd returns it.
type KeyValue struct {
	Key         string
	Value       []byte
	ModRevision int64
}

// RangeResult is what a range read found and the store revision it was
// consistent at.
type RangeResult struct {
	KVs      []KeyValue
	Revision int64
}

// Target is what a Compare looks at.
type Target int

// The revisions a Compare can test.
const (
	// CreateRevision is 0 for an absent key.
	CreateRevision Target = iota
	// ModRevision is the revision of the last write of the key (0 when
	// absent).
	ModRevision
)

// Result is the relation a Compare requires.
type Result int

// Relations between the stored revision and Compare.Revision.
const (
	Equal Result = iota
	Greater
	Less
)

// Compare is one condition of a transaction: the Target revision of Key
// (of every key under it with Prefix) stands in relation Result to
// Revision.
type Compare struct {
	Key      string
	Prefix   bool
	Target   Target
	Result   Result
	Revision int64
}

// OpKind is what an Op does.
type OpKind int

// The operations a transaction runs.
const (
	Get OpKind = iota
	Put
	Delete
)

// Op is one operation of a transaction on a single key.
type Op struct {
	Kind  OpKind
	Key   string
	Value []byte // Put
	// KeysOnly makes a Get return no values.
	KeysOnly bool
	// PrevKV makes a Delete return what it deleted.
	PrevKV bool
}

// OpResult is what one Op returned: a Get's keys, or a Delete's previous
// keys (with PrevKV) and count.
type OpResult struct {
	KVs     []KeyValue
	Deleted int64
}

// TxnResult says which branch ran, the store revision after it, and one
// result per Op of that branch.
type TxnResult struct {
	Succeeded bool
	Revision  int64
	Results   []OpResult
}

// PrefixEnd is the end of the key range holding every key that starts
// with prefix: the prefix with its last byte below 0xff incremented and
// what follows dropped ("\x00", every key, when there is none).
func PrefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// OpGet reads key.
func OpGet(key string) Op { return Op{Kind: Get, Key: key} }

// OpGetKeys reads key without its value.
func OpGetKeys(key string) Op { return Op{Kind: Get, Key: key, KeysOnly: true} }

// OpPut writes value at key.
func OpPut(key string, value []byte) Op { return Op{Kind: Put, Key: key, Value: value} }

// OpDelete deletes key; with prevKV it returns what it deleted.
func OpDelete(key string, prevKV bool) Op { return Op{Kind: Delete, Key: key, PrevKV: prevKV} }

// Absent holds when key does not exist.
func Absent(key string) Compare { return Compare{Key: key, Target: CreateRevision, Result: Equal} }

// Exists holds when key exists.
func Exists(key string) Compare { return Compare{Key: key, Target: CreateRevision, Result: Greater} }

// ModifiedAt holds when key was last written at rev (rev 0: absent).
func ModifiedAt(key string, rev int64) Compare {
	return Compare{Key: key, Target: ModRevision, Result: Equal, Revision: rev}
}
