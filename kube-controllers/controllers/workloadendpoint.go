package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
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

	"github.com/palisade-net/palisade/kube-controllers/queue"
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
	queue  *queue.Queue[string]
	log    *log.Entry

	raw RawStore

	mu sync.Mutex
	// byPod indexes the Kubernetes endpoints by "namespace/pod".
	byPod map[string][]indexed

	first atomic.Bool
	// Updated and Removed count label updates and endpoints removed.
	Updated, Removed atomic.Int64
}

// indexed is one endpoint of the index.
type indexed struct {
	key datastore.Key
	endpoint
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
		period: d.Period, byPod: map[string][]indexed{}, raw: d.Raw, log: log.WithField("controller", "workloadendpoint"),
		queue: queue.New[string]("workloadendpoint", 50*time.Millisecond, d.Queues)}
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
func (w *WorkloadEndpoints) Err() error { return w.queue.Err() }

// Run implements Controller.
func (w *WorkloadEndpoints) Run(ctx context.Context) {
	w.queue.ShutDownOn(ctx)
	go w.follow(ctx)
	go queue.Every(ctx, w.period, func() {
		for _, k := range w.podKeys() {
			w.queue.Add(k)
		}
	})
	reconcile := func(key string) error { return w.reconcile(ctx, key) }
	for w.queue.Process(reconcile, func(key string, err error) bool {
		w.log.WithError(err).WithField("pod", key).Warn("Reconcile failed; retrying with backoff")
		return true
	}) {
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
		if errors.Is(err, datastore.ErrCompacted) {
			attempt = 0
		} else {
			w.queue.SetErr(err)
		}
		d := min(30*time.Second, 100*time.Millisecond<<min(attempt, 9))
		w.log.WithError(err).WithField("retryIn", d).Warn("Following WorkloadEndpoints failed; listing again")
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// endpointPrefix holds every WorkloadEndpoint.
const endpointPrefix = datastore.ResourcePrefix + "workloadendpoints/"

// listAndWatch replaces the index with a fresh list, queues every pod
// the list or the old index names, then follows the changes.
func (w *WorkloadEndpoints) listAndWatch(ctx context.Context) error {
	index := map[string][]indexed{}
	n := 0
	rev, err := w.raw.Scan(ctx, endpointPrefix, func(p datastore.KVPair) {
		n++
		if pod, e, ok := indexRaw(p); ok {
			index[pod] = append(index[pod], e)
		}
	})
	if err != nil {
		return fmt.Errorf("listing workload endpoints: %w", err)
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
		w.markFirst(ctx, n)
	}
	return w.raw.Watch(ctx, endpointPrefix, rev, func(ev RawEvent) {
		if ev.Deleted {
			if pod, e, ok := indexRaw(ev.Prev); ok {
				w.mu.Lock()
				w.byPod[pod] = slices.DeleteFunc(w.byPod[pod], func(x indexed) bool { return x.key == e.key })
				if len(w.byPod[pod]) == 0 {
					delete(w.byPod, pod)
				}
				w.mu.Unlock()
			}
			return
		}
		if pod, e, ok := indexRaw(ev.KV); ok {
			w.mu.Lock()
			eps := slices.DeleteFunc(w.byPod[pod], func(x indexed) bool { return x.key == e.key })
			w.byPod[pod] = append(eps, e)
			w.mu.Unlock()
			w.queue.Add(pod)
		}
	})
}

// rawEndpoint is what the index reads of a stored WorkloadEndpoint.
type rawEndpoint struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Orchestrator string   `json:"orchestrator"`
		Node         string   `json:"node"`
		Pod          string   `json:"pod"`
		ContainerID  string   `json:"containerID"`
		IPNetworks   []string `json:"ipNetworks"`
	} `json:"spec"`
}

// indexRaw reads one stored Kubernetes endpoint (its namespace and name
// from its key) into what the index keeps.
func indexRaw(p datastore.KVPair) (pod string, e indexed, ok bool) {
	ns, name, found := strings.Cut(strings.TrimPrefix(p.Key, endpointPrefix), "/")
	if !found || len(p.Value) == 0 {
		return "", e, false
	}
	var raw rawEndpoint
	if json.Unmarshal(p.Value, &raw) != nil || raw.Spec.Orchestrator != k8s.OrchestratorKubernetes || raw.Spec.Pod == "" {
		return "", e, false
	}
	return ns + "/" + raw.Spec.Pod, indexed{key: datastore.Key{Kind: v3.KindWorkloadEndpoint, Namespace: ns, Name: name},
		endpoint: endpoint{rev: strconv.FormatInt(p.Revision, 10), node: raw.Spec.Node, containerID: raw.Spec.ContainerID,
			labels: labelsHash(raw.Metadata.Labels), ips: raw.Spec.IPNetworks}}, true
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

// reconcile brings the endpoints of one pod in line with it.
func (w *WorkloadEndpoints) reconcile(ctx context.Context, podKey string) error {
	w.mu.Lock()
	eps := slices.Clone(w.byPod[podKey])
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
	for _, x := range eps {
		k, e := x.key, x.endpoint
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
