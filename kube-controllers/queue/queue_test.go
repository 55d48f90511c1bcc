package queue

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestProcessRetriesFailuresAndRecordsTheLastError: a failing item comes
// back after its backoff when failed says retry, the error is the
// queue's Err until a success clears it, and an item failed says not to
// retry is dropped.
func TestProcessRetriesFailuresAndRecordsTheLastError(t *testing.T) {
	q := New[string]("test", time.Millisecond, nil)
	boom := errors.New("boom")
	var seen []string
	reconcile := func(item string) error {
		seen = append(seen, item)
		if len(seen) == 1 {
			return boom
		}
		return nil
	}
	var failures []string
	failed := func(item string, err error) bool {
		failures = append(failures, item+": "+err.Error())
		return true
	}
	q.Add("a")
	if !q.Process(reconcile, failed) {
		t.Fatal("Process returned false on a live queue")
	}
	if !errors.Is(q.Err(), boom) || !slices.Equal(failures, []string{"a: boom"}) {
		t.Fatalf("after a failure: Err %v, failures %v", q.Err(), failures)
	}
	q.Process(reconcile, failed) // waits for the retry of "a"
	if q.Err() != nil || !slices.Equal(seen, []string{"a", "a"}) {
		t.Fatalf("after the retry: Err %v, seen %v", q.Err(), seen)
	}

	q.Add("b")
	q.Process(func(string) error { return boom }, func(string, error) bool { return false })
	time.Sleep(20 * time.Millisecond)
	if q.Len() != 0 {
		t.Fatalf("an item failed said not to retry is queued again: Len %d", q.Len())
	}
	q.ShutDown()
	if q.Process(reconcile, failed) {
		t.Fatal("Process returned true on a shut-down queue")
	}
}

// TestProcessBatchTakesWhatWaits: a batch is the first item and those
// already waiting behind it, up to max.
func TestProcessBatchTakesWhatWaits(t *testing.T) {
	q := New[int]("test", time.Millisecond, nil)
	for i := range 5 {
		q.Add(i)
	}
	var got [][]int
	reconcile := func(b []int) error { got = append(got, slices.Clone(b)); return nil }
	q.ProcessBatch(3, reconcile, nil)
	q.ProcessBatch(3, reconcile, nil)
	if want := [][]int{{0, 1, 2}, {3, 4}}; !slices.EqualFunc(got, want, slices.Equal[[]int]) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// TestShutDownOnEndsWorkers: ending the context shuts the queue down, so
// a worker waiting on it returns.
func TestShutDownOnEndsWorkers(t *testing.T) {
	q := New[string]("test", time.Millisecond, nil)
	ctx, cancel := context.WithCancel(context.Background())
	q.ShutDownOn(ctx)
	done := make(chan bool)
	go func() { done <- q.Process(func(string) error { return nil }, nil) }()
	cancel()
	select {
	case more := <-done:
		if more {
			t.Fatal("Process returned true after shutdown")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("worker still waiting 5s after the context ended")
	}
}
