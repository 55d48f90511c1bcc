// Package queue is the work queue every kube-controllers controller
// runs on: a rate-limited client-go workqueue (named, for its metrics),
// the worker step that reconciles what it holds and retries failures with
// backoff, and the record of the last reconcile error the controller
// reports.
package queue

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// maxBackoff is the longest a failing item waits before it is retried.
const maxBackoff = 30 * time.Second

// Queue holds the items a controller has still to reconcile.
type Queue[T comparable] struct {
	q       workqueue.TypedRateLimitingInterface[T]
	lastErr atomic.Pointer[error]
}

// New makes a queue named name (for its metrics, given to metrics; nil for
// none) whose failing items are retried after base, doubling up to 30s.
func New[T comparable](name string, base time.Duration, metrics workqueue.MetricsProvider) *Queue[T] {
	return &Queue[T]{q: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[T](base, maxBackoff),
		workqueue.TypedRateLimitingQueueConfig[T]{Name: name, MetricsProvider: metrics})}
}

// Add asks for item to be reconciled.
func (q *Queue[T]) Add(item T) { q.q.Add(item) }

// Len is how many items wait.
func (q *Queue[T]) Len() int { return q.q.Len() }

// ShutDown stops the queue: workers return once it is drained.
func (q *Queue[T]) ShutDown() { q.q.ShutDown() }

// ShutDownOn shuts the queue down when ctx ends.
func (q *Queue[T]) ShutDownOn(ctx context.Context) {
	go func() {
		<-ctx.Done()
		q.q.ShutDown()
	}()
}

// Err is the last error recorded, nil after a success.
func (q *Queue[T]) Err() error {
	if p := q.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// SetErr records err as the last error; nil records a success.
func (q *Queue[T]) SetErr(err error) {
	if err == nil {
		q.lastErr.Store(nil)
		return
	}
	q.lastErr.Store(&err)
}

// Process waits for an item and reconciles it; see ProcessBatch.
func (q *Queue[T]) Process(reconcile func(T) error, failed func(item T, err error) (retry bool)) bool {
	return q.ProcessBatch(1,
		func(items []T) error { return reconcile(items[0]) },
		func(items []T, err error) bool { return failed(items[0], err) })
}

// ProcessBatch waits for an item, takes with it up to max-1 more that
// are already waiting, and reconciles them together. A success is
// recorded and the items' backoff forgotten; an error is recorded and
// handed to failed, and the items are retried with backoff when it says
// so (forgotten otherwise). It returns false once the queue is shut down.
func (q *Queue[T]) ProcessBatch(max int, reconcile func([]T) error, failed func(items []T, err error) (retry bool)) bool {
	item, shutdown := q.q.Get()
	if shutdown {
		return false
	}
	batch := []T{item}
	for len(batch) < max && q.q.Len() > 0 {
		item, shutdown := q.q.Get()
		if shutdown {
			break
		}
		batch = append(batch, item)
	}
	err := reconcile(batch)
	q.SetErr(err)
	retry := err != nil && failed(batch, err)
	for _, item := range batch {
		if retry {
			q.q.AddRateLimited(item)
		} else {
			q.q.Forget(item)
		}
		q.q.Done(item)
	}
	return true
}

// Every calls fn each period until ctx ends.
func Every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
