// Package controllers holds calico-kube-controllers' controllers, each
// fed by client-go informers and writing one part of the Calico state in
// etcd: policy (NetworkPolicy → knp.default.*), namespace (Namespace →
// Profile kns.*), serviceaccount (ServiceAccount → Profile ksa.*),
// workloadendpoint (pod labels onto WorkloadEndpoints, endpoints of
// vanished pods removed) and node (Calico nodes of deleted Kubernetes
// nodes removed, labels synced, leaked addresses garbage-collected).
package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Deps are what every controller is built from.
type Deps struct {
	// Informers is the shared informer factory; controllers register the
	// informers they need on it before it is started.
	Informers informers.SharedInformerFactory
	// Client reads the API server directly, to confirm an object is gone
	// before acting on its absence.
	Client kubernetes.Interface
	Store  datastore.Interface
	// KV is the raw view IPAM works on.
	KV datastore.KV
	// Raw reads and follows raw keys, for the workloadendpoint
	// controller's index.
	Raw RawStore
	// Period is the controller's full resync period.
	Period time.Duration
	// Queues receives the work queues' metrics (nil for none).
	Queues workqueue.MetricsProvider
}

// Controller is one running controller.
type Controller interface {
	// Name is its ENABLED_CONTROLLERS name.
	Name() string
	// HasSynced lists the informers it waits for.
	HasSynced() []cache.InformerSynced
	// Run works until ctx ends; call it after the informers synced.
	Run(ctx context.Context)
	// Synced says whether its first full sync is done.
	Synced() bool
	// Err is its last error (nil when its last attempt succeeded).
	Err() error
}

// keyOf is the namespace/name of an informer object, tombstones
// included.
func keyOf(obj any) (namespace, name string, ok bool) {
	if t, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", "", false
	}
	return m.GetNamespace(), m.GetName(), true
}

// handler calls fn with the object's namespace and name on every add,
// update (including informer resyncs) and delete.
func handler(fn func(namespace, name string)) cache.ResourceEventHandler {
	call := func(obj any) {
		if ns, name, ok := keyOf(obj); ok {
			fn(ns, name)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, obj any) { call(obj) },
		DeleteFunc: call,
	}
}

// RawStore reads raw keys in pages and follows their changes, so a
// controller can index many resources without holding them decoded (the
// datastore's Watch keeps every value it has seen, to report deletions).
type RawStore interface {
	// Scan calls fn for every key under prefix, in pages read at one
	// revision, which it returns. A value is only valid during its call.
	Scan(ctx context.Context, prefix string, fn func(datastore.KVPair)) (int64, error)
	// Watch calls fn for every change under prefix after revision, in
	// order, until ctx ends (nil) or the stream fails (an error; one
	// matching datastore.ErrCompacted when the history is gone).
	Watch(ctx context.Context, prefix string, revision int64, fn func(RawEvent)) error
}

// RawEvent is one change Watch reports: a put of KV, or (Deleted) the
// deletion of Prev's key, Prev being its last value.
type RawEvent struct {
	Deleted  bool
	KV, Prev datastore.KVPair
}
