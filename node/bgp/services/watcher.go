package services

import (
	"context"
	"sort"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/palisade-net/palisade/libcalico/k8s/listwatch"
	"github.com/palisade-net/palisade/node/bgp/paths"
)

const byService = "service"

// resync is how often the informers hand every cached object to the
// handlers again.
const resync = 10 * time.Minute

// Watcher keeps informer caches of Services and EndpointSlices.
type Watcher struct {
	node     string
	svcs     cache.SharedIndexInformer
	slices   cache.SharedIndexInformer
	cancel   context.CancelFunc
	running  sync.WaitGroup
	onChange func()
}

// Start runs the informers until Stop or ctx ends; onChange is called on
// every change (and once the caches have synced).
func Start(ctx context.Context, client *listwatch.Client, node string, logger *log.Entry, onChange func()) *Watcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher{node: node, cancel: cancel, onChange: onChange,
		svcs:   cache.NewSharedIndexInformer(client.Services(), &corev1.Service{}, resync, cache.Indexers{}),
		slices: cache.NewSharedIndexInformer(client.EndpointSlices(), &discoveryv1.EndpointSlice{}, resync, cache.Indexers{}),
	}
	// The caches keep only what From reads: whole objects (managed
	// fields, annotations, every endpoint's addresses and hints) made
	// calico-node hold far more than it uses in a large cluster.
	_ = w.svcs.SetTransform(slimService)
	_ = w.slices.SetTransform(func(obj any) (any, error) { return slimSlice(node, obj), nil })
	_ = w.slices.AddIndexers(cache.Indexers{byService: func(obj any) ([]string, error) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return nil, nil
		}
		name := s.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			return nil, nil
		}
		return []string{s.Namespace + "/" + name}, nil
	}})
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { onChange() },
		UpdateFunc: func(any, any) { onChange() },
		DeleteFunc: func(any) { onChange() },
	}
	_, _ = w.svcs.AddEventHandler(h)
	_, _ = w.slices.AddEventHandler(h)
	for _, inf := range []cache.SharedIndexInformer{w.svcs, w.slices} {
		w.running.Go(func() { inf.Run(ctx.Done()) })
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), w.svcs.HasSynced, w.slices.HasSynced) {
			logger.Info("Kubernetes Services and EndpointSlices synced")
			onChange()
		}
	}()
	return w
}

// slimService is svc with only what From reads.
func slimService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	out := &corev1.Service{
		ObjectMeta: listwatch.Meta(svc.ObjectMeta),
		Spec: corev1.ServiceSpec{Type: svc.Spec.Type, ClusterIP: svc.Spec.ClusterIP, ClusterIPs: svc.Spec.ClusterIPs,
			ExternalIPs: svc.Spec.ExternalIPs, ExternalTrafficPolicy: svc.Spec.ExternalTrafficPolicy, InternalTrafficPolicy: svc.Spec.InternalTrafficPolicy},
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: in.IP})
	}
	return out, nil
}

// slimSlice is an EndpointSlice reduced to what From reads as seen from
// node: its Service label and at most two endpoints, the first ready one
// on node and the first ready one elsewhere (From asks only whether a
// ready endpoint exists here, and anywhere).
func slimSlice(node string, obj any) any {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  listwatch.Meta(es.ObjectMeta),
		AddressType: es.AddressType,
	}
	if name, ok := es.Labels[discoveryv1.LabelServiceName]; ok {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: name}
	}
	local, remote := false, false
	for _, ep := range es.Endpoints {
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		here := ep.NodeName != nil && *ep.NodeName == node
		if (here && local) || (!here && remote) {
			continue
		}
		local, remote = local || here, remote || !here
		out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{NodeName: ep.NodeName, Conditions: discoveryv1.EndpointConditions{Ready: ep.Conditions.Ready}})
	}
	return out
}

// Stop ends the informers and waits for them.
func (w *Watcher) Stop() {
	w.cancel()
	w.running.Wait()
}

// Synced reports whether both caches hold a full list.
func (w *Watcher) Synced() bool { return w.svcs.HasSynced() && w.slices.HasSynced() }

// Services returns every Service as seen from the watcher's node, sorted
// by name.
func (w *Watcher) Services() []paths.Service {
	objs := w.svcs.GetStore().List()
	out := make([]paths.Service, 0, len(objs))
	for _, o := range objs {
		svc, ok := o.(*corev1.Service)
		if !ok {
			continue
		}
		idx, _ := w.slices.GetIndexer().ByIndex(byService, svc.Namespace+"/"+svc.Name)
		slices := make([]*discoveryv1.EndpointSlice, 0, len(idx))
		for _, s := range idx {
			if es, ok := s.(*discoveryv1.EndpointSlice); ok {
				slices = append(slices, es)
			}
		}
		out = append(out, From(w.node, svc, slices))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
