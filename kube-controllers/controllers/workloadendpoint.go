package controllers

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s"
)

// WorkloadEndpoints keeps each pod's WorkloadEndpoints carrying the
// pod's labels, and removes the endpoints of pods that no longer exist
// (a CNI DEL that never came), releasing their addresses. It follows the
// endpoints with a datastore watch and the pods with an informer; a
// change to either reconciles that pod.
type WorkloadEndpoints struct {
	pods   corelisters.PodLister
	synced cache.InformerSynced
	client kubernetes.Interface
	store  datastore.Interface
	alloc  *ipam.Allocator
	period time.Duration
	queue  workqueue.TypedRateLimitingInterface[string]
	log    *log.Entry

	mu sync.Mutex
	// byPod indexes the Kubernetes endpoints by "namespace/pod".
	byPod map[string]map[datastore.Key]endpoint

	first   atomic.Bool
	lastErr atomic.Pointer[error]
	// Updated and Removed count label updates and endpoints removed.
	Updated, Removed atomic.Int64
}

// endpoint is what the controller keeps of a WorkloadEndpoint.
type endpoint struct {
	rev, node, containerID string
	labels                 [32]byte
	ips                    []string
}

// NewWorkloadEndpoints registers the pod informer and returns the
// controller.
func NewWorkloadEndpoints(d Deps) *WorkloadEndpoints {
	inf := d.Informers.Core().V1().Pods()
	w := &WorkloadEndpoints{pods: inf.Lister(), synced: inf.Informer().HasSynced, client: d.Client, store: d.Store,
		period: d.Period, byPod: map[string]map[datastore.Key]endpoint{}, log: log.WithField("controller", "workloadendpoint"),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "workloadendpoint"})}
	if d.KV != nil {
		w.alloc = ipam.New(d.Store, d.KV)
	}
	_, _ = inf.Informer().AddEventHandler(handler(func(ns, name string) { w.queue.Add(ns + "/" + name) }))
	return w
}

// Name implements Controller.
func (w *WorkloadEndpoints) Name() string { return "workloadendpoint" }

// HasSynced implements Controller.
func (w *WorkloadEndpoints) HasSynced() []cache.InformerSynced {
	return []cache.InformerSynced{w.synced}
}

// Synced implements Controller: the endpoints were listed and every pod
// holding one reconciled once.
func (w *WorkloadEndpoints) Synced() bool { return w.first.Load() }

// Err implements Controller.
func (w *WorkloadEndpoints) Err() error {
	if p := w.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Run implements Controller.
func (w *WorkloadEndpoints) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	go w.follow(ctx)
	go func() {
		t := time.NewTicker(w.period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				for _, k := range w.podKeys() {
					w.queue.Add(k)
				}
			}
		}
	}()
	for w.processNext(ctx) {
	}
}

// follow lists the endpoints and watches them, listing again whenever
// the watch cannot go on, until ctx ends.
func (w *WorkloadEndpoints) follow(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := w.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		w.fail(err)
		d := min(30*time.Second, 100*time.Millisecond<<min(attempt, 9))
		w.log.WithError(err).WithField("retryIn", d).Warn("Following WorkloadEndpoints failed; listing again")
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

func (w *WorkloadEndpoints) listAndWatch(ctx context.Context) error {
	opts := datastore.ListOptions{Kind: v3.KindWorkloadEndpoint}
	items, rev, err := w.store.List(ctx, opts)
	if err != nil {
		return fmt.Errorf("listing workload endpoints: %w", err)
	}
	index := map[string]map[datastore.Key]endpoint{}
	for _, r := range items {
		if pod, k, e, ok := indexable(r); ok {
			if index[pod] == nil {
				index[pod] = map[datastore.Key]endpoint{}
			}
			index[pod][k] = e
		}
	}
	w.mu.Lock()
	old := w.byPod
	w.byPod = index
	w.mu.Unlock()
	for pod := range index {
		w.queue.Add(pod)
	}
	for pod := range old {
		if index[pod] == nil {
			w.queue.Add(pod)
		}
	}
	if !w.first.Load() {
		w.markFirst(ctx, len(items))
	}
	wt, err := w.store.Watch(ctx, opts, rev)
	if err != nil {
		return fmt.Errorf("watching workload endpoints: %w", err)
	}
	defer wt.Stop()
	for ev := range wt.Events() {
		switch ev.Type {
		case datastore.Error:
			w.log.WithError(ev.Err).Warn("WorkloadEndpoint watch error")
			continue
		case datastore.Added, datastore.Modified:
			pod, k, e, ok := indexable(ev.Object)
			if !ok {
				continue
			}
			w.mu.Lock()
			if w.byPod[pod] == nil {
				w.byPod[pod] = map[datastore.Key]endpoint{}
			}
			w.byPod[pod][k] = e
			w.mu.Unlock()
			w.queue.Add(pod)
		case datastore.Deleted:
			pod, k, _, ok := indexable(ev.Object)
			if !ok {
				continue
			}
			w.mu.Lock()
			delete(w.byPod[pod], k)
			if len(w.byPod[pod]) == 0 {
				delete(w.byPod, pod)
			}
			w.mu.Unlock()
		}
	}
	return errors.New("the watch ended")
}

// markFirst reports the controller synced once the pods queued by the
// first list have been reconciled.
func (w *WorkloadEndpoints) markFirst(ctx context.Context, n int) {
	began := time.Now()
	go func() {
		for ctx.Err() == nil {
			if w.queue.Len() == 0 {
				w.first.Store(true)
				w.log.WithFields(log.Fields{"endpoints": n, "took": time.Since(began).Round(time.Millisecond)}).Info("First sync done")
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// indexable reads a Kubernetes WorkloadEndpoint into the index.
func indexable(r v3.Resource) (pod string, k datastore.Key, e endpoint, ok bool) {
	wep, isWEP := r.(*v3.WorkloadEndpoint)
	if !isWEP || wep.Spec.Orchestrator != k8s.OrchestratorKubernetes || wep.Spec.Pod == "" {
		return "", k, e, false
	}
	return wep.Namespace + "/" + wep.Spec.Pod, datastore.KeyOf(wep),
		endpoint{rev: wep.ResourceVersion, node: wep.Spec.Node, containerID: wep.Spec.ContainerID,
			labels: labelsHash(wep.Labels), ips: wep.Spec.IPNetworks}, true
}

func labelsHash(l map[string]string) [32]byte {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(l)) {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(l[k]))
		h.Write([]byte{0})
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

func (w *WorkloadEndpoints) podKeys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.byPod))
}

func (w *WorkloadEndpoints) fail(err error) { w.lastErr.Store(&err) }

func (w *WorkloadEndpoints) processNext(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	if err := w.reconcile(ctx, key); err != nil {
		w.fail(err)
		w.log.WithError(err).WithField("pod", key).Warn("Reconcile failed; retrying with backoff")
		w.queue.AddRateLimited(key)
		return true
	}
	w.lastErr.Store(nil)
	w.queue.Forget(key)
	return true
}

// reconcile brings the endpoints of one pod in line with it.
func (w *WorkloadEndpoints) reconcile(ctx context.Context, podKey string) error {
	w.mu.Lock()
	eps := maps.Clone(w.byPod[podKey])
	w.mu.Unlock()
	if len(eps) == 0 {
		return nil
	}
	ns, name, _ := strings.Cut(podKey, "/")
	pod, err := w.pods.Pods(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	var errs []error
	for k, e := range eps {
		if pod != nil && pod.Spec.NodeName == e.node {
			if err := w.syncLabels(ctx, k, e, pod); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := w.removeOrphan(ctx, k, e, ns, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// syncLabels writes the pod's labels (and Calico's) onto the endpoint
// when they differ.
func (w *WorkloadEndpoints) syncLabels(ctx context.Context, k datastore.Key, e endpoint, pod *corev1.Pod) error {
	want := k8s.PodLabels(pod)
	if labelsHash(want) == e.labels {
		return nil
	}
	r, err := w.store.Get(ctx, k)
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", k, err)
	}
	wep := r.(*v3.WorkloadEndpoint)
	if labelsHash(wep.Labels) == labelsHash(want) {
		return nil
	}
	wep.Labels = want
	if _, err := w.store.Update(ctx, wep); err != nil {
		return fmt.Errorf("updating the labels of %s: %w", k, err)
	}
	w.Updated.Add(1)
	w.log.WithFields(log.Fields{"endpoint": k.Name, "namespace": k.Namespace}).Debug("Pod labels written to its endpoint")
	return nil
}

// removeOrphan deletes an endpoint whose pod is gone (or now runs on
// another node), once the API server itself confirms it, and releases
// its addresses.
func (w *WorkloadEndpoints) removeOrphan(ctx context.Context, k datastore.Key, e endpoint, ns, name string) error {
	live, err := w.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && live.Spec.NodeName == e.node:
		return nil // the informer has not caught up yet
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("confirming pod %s/%s is gone: %w", ns, name, err)
	}
	_, err = w.store.Delete(ctx, k, e.rev)
	switch {
	case errors.Is(err, datastore.ErrNotFound):
		return nil
	case errors.Is(err, datastore.ErrConflict):
		w.queue.Add(ns + "/" + name) // changed meanwhile: look again
		return nil
	case err != nil:
		return fmt.Errorf("deleting %s: %w", k, err)
	}
	w.Removed.Add(1)
	released, rerr := w.release(ctx, e)
	w.log.WithFields(log.Fields{"endpoint": k.Name, "namespace": k.Namespace, "pod": ns + "/" + name,
		"node": e.node, "released": released}).Info("Removed the endpoint of a pod that no longer exists")
	return rerr
}

// release frees the endpoint's addresses that are still held by its
// container's handle (another container's are left alone).
func (w *WorkloadEndpoints) release(ctx context.Context, e endpoint) ([]string, error) {
	if w.alloc == nil {
		return nil, nil
	}
	return releaseEndpoint(ctx, w.alloc, e)
}

// releaseEndpoint releases the handles of e's container that hold e's
// addresses, and returns them.
func releaseEndpoint(ctx context.Context, alloc *ipam.Allocator, e endpoint) ([]string, error) {
	if e.containerID == "" {
		return nil, nil
	}
	handles := map[string]bool{}
	for _, n := range e.ips {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			continue
		}
		a, err := alloc.GetAssignmentAttributes(ctx, p.Addr())
		if errors.Is(err, datastore.ErrNotFound) || errors.Is(err, ipam.ErrNotAssigned) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the allocation of %s: %w", p.Addr(), err)
		}
		if strings.HasSuffix(a.HandleID, "."+e.containerID) {
			handles[a.HandleID] = true
		}
	}
	var out []string
	for _, h := range slices.Sorted(maps.Keys(handles)) {
		if err := alloc.ReleaseByHandle(ctx, h); err != nil && !errors.Is(err, datastore.ErrNotFound) {
			return out, fmt.Errorf("releasing handle %s: %w", h, err)
		}
		out = append(out, h)
	}
	return out, nil
}
