package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Op is a write operation.
type Op int

// The write operations.
const (
	// OpCreate stores a new resource; it fails if the resource exists.
	OpCreate Op = iota + 1
	// OpUpdate replaces an existing resource; it fails if it is absent.
	OpUpdate
	// OpApply creates the resource or replaces it.
	OpApply
)

func (o Op) String() string {
	switch o {
	case OpCreate:
		return "create"
	case OpUpdate:
		return "update"
	case OpApply:
		return "apply"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Result is the outcome of writing one resource: the stored resource, or
// the error that stopped it.
type Result struct {
	Resource v3.Resource
	Err      error
}

// listThreshold is the number of resources of one kind in a batch from
// which the client reads the whole kind once instead of one Get each.
const listThreshold = 8

// writers is how many writes of a batch are in flight at once.
const writers = 64

// conflictRetries is how often a write whose own revision check lost a
// race is re-read and retried.
const conflictRetries = 3

// Create stores a new resource after preparing and checking it.
func (c *Client) Create(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	res := c.Write(ctx, OpCreate, []v3.Resource{r})[0]
	return res.Resource, res.Err
}

// Update replaces an existing resource after preparing and checking it.
// A resourceVersion on r makes the write conditional on it; without one,
// the write is conditional on the version the checks were made against.
func (c *Client) Update(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	res := c.Write(ctx, OpUpdate, []v3.Resource{r})[0]
	return res.Resource, res.Err
}

// Apply creates or replaces a resource after preparing and checking it.
func (c *Client) Apply(ctx context.Context, r v3.Resource) (v3.Resource, error) {
	res := c.Write(ctx, OpApply, []v3.Resource{r})[0]
	return res.Resource, res.Err
}

// pending is one resource of a batch on its way to the datastore.
type pending struct {
	index   int
	r       v3.Resource // prepared
	path    string
	exists  bool
	autoRev bool // resourceVersion filled in by the client, not the caller
}

// Write performs op on every resource in order and returns one Result per
// resource. Each resource is prepared and checked (against the stored
// state and against the resources before it in the batch) before it is
// written; one that fails is not written, and the others go on. The
// stored state of each kind is read once per batch, and writes of kinds
// without cross-resource rules are issued concurrently.
func (c *Client) Write(ctx context.Context, op Op, rs []v3.Resource) []Result {
	return c.write(ctx, op, rs, nil, conflictRetries)
}

// WritePrepared is Write for resources the caller has already passed
// through Prepare (prepared[i] is Prepare(rs[i])), so a caller that
// checks a whole batch first does not pay for the checks twice.
func (c *Client) WritePrepared(ctx context.Context, op Op, prepared []v3.Resource) []Result {
	return c.write(ctx, op, prepared, prepared, conflictRetries)
}

func (c *Client) write(ctx context.Context, op Op, rs, already []v3.Resource, retries int) []Result {
	results := make([]Result, len(rs))
	prepared := make([]v3.Resource, len(rs))
	perKind := map[string]int{}
	for i, r := range rs {
		p := r
		if already == nil {
			var err error
			if p, err = c.Prepare(r); err != nil {
				results[i].Err = err
				continue
			}
		}
		prepared[i] = p
		perKind[p.GetTypeMeta().Kind]++
	}
	st, err := c.loadState(ctx, perKind, prepared)
	if err != nil {
		for i := range results {
			if results[i].Err == nil {
				results[i].Err = err
			}
		}
		return results
	}

	// Check every resource in order against the state as the batch
	// before it leaves it.
	var todo []pending
	ordered := false
	for i, r := range prepared {
		if r == nil {
			continue
		}
		p, err := st.check(op, i, r)
		if err != nil {
			results[i].Err = err
			continue
		}
		// Tiers are written before the policies checked against them.
		// So are BGP filters before the peers that name them.
		ordered = ordered || hasCrossRules(r.GetTypeMeta().Kind) || r.GetTypeMeta().Kind == v3.KindTier ||
			r.GetTypeMeta().Kind == v3.KindBGPFilter
		todo = append(todo, p)
	}

	n := writers
	if ordered {
		n = 1
	}
	c.issue(ctx, todo, n, func(p pending, res v3.Resource, err error) {
		if err != nil && retries > 0 && p.autoRev && errors.Is(err, datastore.ErrConflict) ||
			err != nil && retries > 0 && op == OpApply && !p.exists && errors.Is(err, datastore.ErrAlreadyExists) {
			// Someone else wrote between our read and our write: read
			// again and redo the checks for this resource alone.
			log.WithFields(log.Fields{"key": datastore.KeyOf(p.r).String(), "op": op.String()}).Debug("Write raced another writer; retrying")
			again := c.write(ctx, op, []v3.Resource{rs[p.index]}, nil, retries-1)[0]
			res, err = again.Resource, again.Err
		}
		results[p.index] = Result{Resource: res, Err: err}
	})
	return results
}

// batchSize is how many writes go to the datastore in one transaction.
const batchSize = 100

// issue writes the checked resources and calls done for each. Runs of
// distinct keys go to the datastore as batches, one round trip each; a
// batch the datastore rejects (a resource changed since it was read) or
// fails to write is written again one resource at a time, which reports
// each resource's own outcome.
func (c *Client) issue(ctx context.Context, todo []pending, n int, done func(pending, v3.Resource, error)) {
	if len(todo) < 2 {
		c.issueEach(ctx, todo, n, done)
		return
	}
	var single []pending
	for _, chunk := range batches(todo) {
		writes := make([]datastore.BatchWrite, len(chunk))
		for i, p := range chunk {
			writes[i] = datastore.BatchWrite{Resource: p.r, Create: !p.exists}
		}
		stored, err := c.store.WriteBatch(ctx, writes)
		if err != nil {
			log.WithError(err).WithField("writes", len(chunk)).Debug("Batch not written; writing its resources one by one")
			single = append(single, chunk...)
			continue
		}
		for i, p := range chunk {
			done(p, stored[i], nil)
		}
	}
	c.issueEach(ctx, single, n, done)
}

// batches cuts todo into runs of at most batchSize writes that name each
// key once.
func batches(todo []pending) [][]pending {
	var out [][]pending
	start := 0
	seen := map[string]bool{}
	for i, p := range todo {
		if i-start == batchSize || seen[p.path] {
			out = append(out, todo[start:i])
			start = i
			clear(seen)
		}
		seen[p.path] = true
	}
	return append(out, todo[start:])
}

// issueEach sends the writes one resource each, with up to n in flight,
// and calls done for each (done is called from one goroutine at a time per
// pending entry; entries are distinct, so it may store into per-index
// slots without locking).
func (c *Client) issueEach(ctx context.Context, todo []pending, n int, done func(pending, v3.Resource, error)) {
	do := func(p pending) {
		var res v3.Resource
		var err error
		if p.exists {
			res, err = c.store.Update(ctx, p.r)
		} else {
			res, err = c.store.Create(ctx, p.r)
		}
		done(p, res, err)
	}
	if n <= 1 || len(todo) <= 1 {
		for _, p := range todo {
			do(p)
		}
		return
	}
	work := make(chan pending)
	var wg sync.WaitGroup
	for range min(n, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				do(p)
			}
		}()
	}
	for _, p := range todo {
		work <- p
	}
	close(work)
	wg.Wait()
}
