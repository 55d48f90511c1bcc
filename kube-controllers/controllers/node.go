package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/palisade-net/palisade/kube-controllers/queue"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s"
)

// KubeLabelsAnnotation records, on a Calico node, the Kubernetes node
// labels last copied onto it, so labels removed in Kubernetes are
// removed again and labels set only in Calico are kept.
const KubeLabelsAnnotation = "projectcalico.org/kube-labels"

// NodeOptions are the node controller's settings.
type NodeOptions struct {
	// SyncLabels copies Kubernetes node labels onto Calico nodes.
	SyncLabels bool
	// LeakGracePeriod is how long an address must have been seen leaked
	// before it is released; 0 turns IPAM garbage collection off.
	LeakGracePeriod time.Duration
	// Reclaimed, when set, is told of each address garbage-collected,
	// with the node it was allocated on.
	Reclaimed func(ip, node string)
}

// Nodes removes Calico nodes whose Kubernetes node is gone (Calico nodes
// carry their Kubernetes name in spec.orchRefs; nodes without one are
// not Kubernetes nodes and are left alone), copies node labels, and
// garbage-collects leaked pod addresses: an address whose pod no longer
// exists (or now has other addresses) is released once it was seen
// leaked on two passes at least LeakGracePeriod apart, never while its
// pod holds it. A sticky reservation (ipReleasePolicy) is not a leak
// while its owner wants it: "never" ones are kept for good, "immutable"
// ones while their StatefulSet exists and has the pod's ordinal.
type Nodes struct {
	nodes       corelisters.NodeLister
	pods        corelisters.PodLister
	sets        appslisters.StatefulSetLister
	nodesSynced cache.InformerSynced
	podsSynced  cache.InformerSynced
	setsSynced  cache.InformerSynced
	client      kubernetes.Interface
	store       datastore.Interface
	alloc       *ipam.Allocator
	opts        NodeOptions
	period      time.Duration
	queue       *queue.Queue[string]
	log         *log.Entry

	mu sync.Mutex
	// byKubeName maps Kubernetes node names to Calico node names, from
	// the last full pass.
	byKubeName map[string]string
	// leaks holds when each suspected leak ("ip handle") was first seen.
	leaks map[string]time.Time

	first atomic.Bool
	// Released counts addresses garbage-collected; Deleted Calico nodes
	// removed.
	Released, Deleted atomic.Int64
}

// fullPass is the queue item of a full pass.
const fullPass = ""

// NewNodes registers the node, pod and StatefulSet informers (a node's
// events queue that node) and returns the controller.
func NewNodes(d Deps, o NodeOptions) *Nodes {
	ninf := d.Informers.Core().V1().Nodes()
	pinf := d.Informers.Core().V1().Pods()
	sinf := d.Informers.Apps().V1().StatefulSets()
	n := &Nodes{nodes: ninf.Lister(), pods: pinf.Lister(), sets: sinf.Lister(), nodesSynced: ninf.Informer().HasSynced,
		podsSynced: pinf.Informer().HasSynced, setsSynced: sinf.Informer().HasSynced, client: d.Client, store: d.Store, opts: o, period: d.Period,
		byKubeName: map[string]string{}, leaks: map[string]time.Time{}, log: log.WithField("controller", "node"),
		queue: queue.New[string]("node", 100*time.Millisecond, d.Queues)}
	if d.KV != nil {
		n.alloc = ipam.New(d.Store, d.KV)
	}
	_, _ = ninf.Informer().AddEventHandler(handler(func(_, name string) { n.queue.Add(name) }))
	return n
}

// Name implements Controller.
func (n *Nodes) Name() string { return "node" }

// HasSynced implements Controller.
func (n *Nodes) HasSynced() []cache.InformerSynced {
	return []cache.InformerSynced{n.nodesSynced, n.podsSynced, n.setsSynced}
}

// Synced implements Controller.
func (n *Nodes) Synced() bool { return n.first.Load() }

// Err implements Controller.
func (n *Nodes) Err() error { return n.queue.Err() }

// Run implements Controller.
func (n *Nodes) Run(ctx context.Context) {
	n.queue.ShutDownOn(ctx)
	n.queue.Add(fullPass)
	go queue.Every(ctx, n.period, func() { n.queue.Add(fullPass) })
	reconcile := func(item string) error {
		if item == fullPass {
			return n.pass(ctx)
		}
		return n.node(ctx, item)
	}
	for n.queue.Process(reconcile, func(item string, err error) bool {
		n.log.WithError(err).WithField("item", item).Warn("Node reconcile failed; retrying with backoff")
		return true
	}) {
	}
}

// kubeName is the Kubernetes node a Calico node stands for, if any.
func kubeName(cn *v3.Node) (string, bool) {
	for _, o := range cn.Spec.OrchRefs {
		if o.Orchestrator == k8s.OrchestratorKubernetes && o.NodeName != "" {
			return o.NodeName, true
		}
	}
	return "", false
}

// pass removes the Calico nodes of vanished Kubernetes nodes, syncs
// every node's labels, and collects leaked addresses.
func (n *Nodes) pass(ctx context.Context) error {
	items, _, err := n.store.List(ctx, datastore.ListOptions{Kind: v3.KindNode})
	if err != nil {
		return fmt.Errorf("listing Calico nodes: %w", err)
	}
	index := map[string]string{}
	var errs []error
	for _, r := range items {
		cn := r.(*v3.Node)
		kn, ok := kubeName(cn)
		if !ok {
			continue
		}
		index[kn] = cn.Name
		if err := n.reconcileNode(ctx, cn, kn); err != nil {
			errs = append(errs, err)
		}
	}
	n.mu.Lock()
	n.byKubeName = index
	n.mu.Unlock()
	if err := n.collectLeaks(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !n.first.Swap(true) {
		n.log.WithField("calicoNodes", len(items)).Info("First sync done")
	}
	return nil
}

// node reconciles the Calico node of one Kubernetes node.
func (n *Nodes) node(ctx context.Context, kn string) error {
	n.mu.Lock()
	name, ok := n.byKubeName[kn]
	n.mu.Unlock()
	if !ok {
		name = kn // Calico names a node as Kubernetes does
	}
	r, err := n.store.Get(ctx, datastore.Key{Kind: v3.KindNode, Name: name})
	if errors.Is(err, datastore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Calico node %q: %w", name, err)
	}
	cn := r.(*v3.Node)
	if ref, ok := kubeName(cn); !ok || ref != kn {
		return nil
	}
	n.mu.Lock()
	n.byKubeName[kn] = cn.Name
	n.mu.Unlock()
	return n.reconcileNode(ctx, cn, kn)
}

// reconcileNode deletes cn when its Kubernetes node kn is gone (as the
// API server itself confirms), else syncs its labels.
func (n *Nodes) reconcileNode(ctx context.Context, cn *v3.Node, kn string) error {
	kube, err := n.nodes.Get(kn)
	if apierrors.IsNotFound(err) {
		if _, err := n.client.CoreV1().Nodes().Get(ctx, kn, metav1.GetOptions{}); err == nil {
			return nil // the informer has not caught up
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("confirming Kubernetes node %q is gone: %w", kn, err)
		}
		if err := DeleteCalicoNode(ctx, n.store, n.alloc, cn.Name); err != nil {
			return err
		}
		n.Deleted.Add(1)
		n.mu.Lock()
		delete(n.byKubeName, kn)
		n.mu.Unlock()
		return nil
	}
	if err != nil || !n.opts.SyncLabels {
		return err
	}
	var prev map[string]string
	if a := cn.Annotations[KubeLabelsAnnotation]; a != "" {
		_ = json.Unmarshal([]byte(a), &prev)
	}
	want := map[string]string{}
	for k, v := range cn.Labels {
		if _, fromKube := prev[k]; !fromKube {
			want[k] = v
		}
	}
	maps.Copy(want, kube.Labels)
	kubeJSON, _ := json.Marshal(kube.Labels)
	if maps.Equal(want, cn.Labels) && cn.Annotations[KubeLabelsAnnotation] == string(kubeJSON) {
		return nil
	}
	cn.Labels = want
	if len(cn.Labels) == 0 {
		cn.Labels = nil
	}
	if cn.Annotations == nil {
		cn.Annotations = map[string]string{}
	}
	cn.Annotations[KubeLabelsAnnotation] = string(kubeJSON)
	if _, err := n.store.Update(ctx, cn); err != nil {
		return fmt.Errorf("syncing the labels of Calico node %q: %w", cn.Name, err)
	}
	n.log.WithField("node", cn.Name).Debug("Kubernetes node labels copied")
	return nil
}

// collectLeaks looks at every pod address IPAM holds (never a Service's
// LoadBalancer address: the loadbalancer controller owns those): one
// whose pod is gone, or no longer has it, is a candidate leak; a
// candidate seen again at least the grace period after it was first seen
// is released (by its handle, so an address handed to someone else
// meanwhile is never touched). Candidates no longer leaked are forgotten.
func (n *Nodes) collectLeaks(ctx context.Context) error {
	if n.alloc == nil || n.opts.LeakGracePeriod <= 0 {
		return nil
	}
	blocks, err := n.alloc.ListBlocks(ctx)
	if err != nil {
		return fmt.Errorf("listing IPAM blocks: %w", err)
	}
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	seen := map[string]bool{}
	release := map[string][]string{}
	pods := map[string][2]string{}
	sticky := map[string]ipam.Allocation{}
	staleUse := map[string][3]string{}
	nodeOf := map[string]string{}
	for _, b := range blocks {
		for _, a := range b.Allocations {
			if a.IsLoadBalancer() {
				continue // a Service's: only the loadbalancer controller releases it
			}
			ns, pod := a.Attrs["namespace"], a.Attrs["pod"]
			if ns == "" || pod == "" || a.HandleID == "" {
				continue // not a pod's address
			}
			if a.IsSticky() && a.InUse() && !n.podExists(ns, pod, a.Attrs[ipam.AttrPodUID]) {
				// Used by a container whose pod is gone (its node died
				// before the DEL): after the grace period the use ends,
				// so the re-created pod does not wait for ever.
				key := "use " + a.IP.String() + " " + a.Attrs[ipam.AttrContainer]
				seen[key] = true
				if first, ok := n.leaks[key]; !ok {
					n.leaks[key] = now
				} else if now.Sub(first) >= n.opts.LeakGracePeriod {
					staleUse[a.Attrs[ipam.AttrContainer]] = [3]string{ns, pod, a.Attrs[ipam.AttrPodUID]}
				}
			}
			if a.IsSticky() && n.stickyKept(a) {
				continue // reserved for its owner
			}
			if n.podHolds(ns, pod, a.IP) {
				continue
			}
			key := a.IP.String() + " " + a.HandleID
			seen[key] = true
			fields := log.Fields{"ip": a.IP, "handle": a.HandleID, "pod": ns + "/" + pod, "node": a.Attrs["node"]}
			first, ok := n.leaks[key]
			switch {
			case !ok:
				n.leaks[key] = now
				n.log.WithFields(fields).WithField("gracePeriod", n.opts.LeakGracePeriod).Warn("Candidate IP leak: its pod does not hold it; released if still leaked after the grace period")
			case now.Sub(first) >= n.opts.LeakGracePeriod:
				release[a.HandleID] = append(release[a.HandleID], a.IP.String())
				nodeOf[a.IP.String()] = a.Attrs["node"]
				pods[a.HandleID] = [2]string{ns, pod}
				if a.IsSticky() {
					sticky[a.HandleID] = a
				}
				n.log.WithFields(fields).WithField("leakedFor", now.Sub(first).Round(time.Second)).Warn("Garbage collecting leaked IP address")
			}
		}
	}
	for k := range n.leaks {
		if !seen[k] {
			delete(n.leaks, k)
		}
	}
	var errs []error
	for container, p := range staleUse {
		live, err := n.client.CoreV1().Pods(p[0]).Get(ctx, p[1], metav1.GetOptions{})
		if err == nil && string(live.UID) == p[2] {
			continue
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("confirming pod %s/%s is gone: %w", p[0], p[1], err))
			continue
		}
		if _, err := n.alloc.StopUsingSticky(ctx, container); err != nil {
			errs = append(errs, fmt.Errorf("ending the sticky address use of container %s: %w", container, err))
			continue
		}
		n.log.WithFields(log.Fields{"container": container, "pod": p[0] + "/" + p[1]}).Warn("Ended the sticky address use of a container whose pod is gone")
	}
	for h, ips := range release {
		if held, err := n.podHoldsLive(ctx, pods[h], ips); err != nil || held {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if al, ok := sticky[h]; ok {
			if kept, err := n.stickyKeptLive(ctx, al); err != nil || kept {
				if err != nil {
					errs = append(errs, err)
				}
				continue
			}
		}
		if err := n.alloc.ReleaseByHandle(ctx, h); err != nil && !errors.Is(err, datastore.ErrNotFound) {
			errs = append(errs, fmt.Errorf("releasing leaked handle %s: %w", h, err))
			continue
		}
		n.Released.Add(int64(len(ips)))
		for _, ip := range ips {
			delete(n.leaks, ip+" "+h)
			if n.opts.Reclaimed != nil {
				n.opts.Reclaimed(ip, nodeOf[ip])
			}
		}
	}
	return errors.Join(errs...)
}

// podHolds says whether pod ns/name exists and holds ip, or exists and
// has no address yet (it is being set up). n.mu is held.
func (n *Nodes) podHolds(ns, name string, ip netip.Addr) bool {
	p, err := n.pods.Pods(ns).Get(name)
	if err != nil {
		return false
	}
	if p.Status.PodIP == "" && len(p.Status.PodIPs) == 0 {
		return true
	}
	if a, err := netip.ParseAddr(p.Status.PodIP); err == nil && a == ip {
		return true
	}
	for _, pip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(pip.IP); err == nil && a == ip {
			return true
		}
	}
	return false
}

// podHoldsLive asks the API server itself, before a release, whether the
// pod exists and holds one of ips (or has no address yet).
func (n *Nodes) podHoldsLive(ctx context.Context, pod [2]string, ips []string) (bool, error) {
	p, err := n.client.CoreV1().Pods(pod[0]).Get(ctx, pod[1], metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("confirming pod %s/%s is gone: %w", pod[0], pod[1], err)
	}
	if p.Status.PodIP == "" && len(p.Status.PodIPs) == 0 {
		return true, nil
	}
	for _, pip := range append([]corev1.PodIP{{IP: p.Status.PodIP}}, p.Status.PodIPs...) {
		for _, ip := range ips {
			if pip.IP == ip {
				return true, nil
			}
		}
	}
	return false, nil
}

// stickyKept says whether a sticky reservation still belongs to its
// owner, from the informers' view: a "never" one always does; an
// "immutable" one while its StatefulSet (the same object, by UID) exists
// and its pod's ordinal is below the StatefulSet's replicas. n.mu is
// held.
func (n *Nodes) stickyKept(a ipam.Allocation) bool {
	if a.Attrs[ipam.AttrReleasePolicy] != string(k8s.ReleaseImmutable) {
		return true // never, or a policy this version does not know
	}
	set, err := n.sets.StatefulSets(a.Attrs["namespace"]).Get(a.Attrs[ipam.AttrOwnerName])
	if err != nil {
		return !apierrors.IsNotFound(err)
	}
	return setWants(set, a)
}

// stickyKeptLive is stickyKept asking the API server itself, before a
// release.
func (n *Nodes) stickyKeptLive(ctx context.Context, a ipam.Allocation) (bool, error) {
	if a.Attrs[ipam.AttrReleasePolicy] != string(k8s.ReleaseImmutable) {
		return true, nil
	}
	ns, name := a.Attrs["namespace"], a.Attrs[ipam.AttrOwnerName]
	set, err := n.client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("confirming StatefulSet %s/%s no longer wants %s: %w", ns, name, a.IP, err)
	}
	return setWants(set, a), nil
}

// setWants says whether StatefulSet set is the reservation's owner and
// still has the reservation's pod (its ordinal is below spec.replicas).
func setWants(set *appsv1.StatefulSet, a ipam.Allocation) bool {
	if uid := a.Attrs[ipam.AttrOwnerUID]; uid != "" && string(set.UID) != uid {
		return false // deleted and created again: not the owner
	}
	ord, ok := k8s.StatefulSetOrdinal(set.Name, a.Attrs["pod"])
	if !ok {
		return true // not one of its pods' names: leave it alone
	}
	replicas := int32(1)
	if set.Spec.Replicas != nil {
		replicas = *set.Spec.Replicas
	}
	return ord < int(replicas)
}

// podExists says whether pod ns/name exists with uid (any uid when uid is
// empty). n.mu is held.
func (n *Nodes) podExists(ns, name, uid string) bool {
	p, err := n.pods.Pods(ns).Get(name)
	return err == nil && (uid == "" || string(p.UID) == uid)
}
