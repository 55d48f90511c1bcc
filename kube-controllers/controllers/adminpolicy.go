package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	anpclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	anpinformers "sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions"
	anplisters "sigs.k8s.io/network-policy-api/pkg/client/listers/apis/v1alpha1"

	"github.com/palisade-net/palisade/kube-controllers/mirror"
	"github.com/palisade-net/palisade/kube-controllers/queue"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/k8s"
)

// AdminPolicyGroupVersion is the API the AdminPolicy controller reads.
const AdminPolicyGroupVersion = "policy.networking.k8s.io/v1alpha1"

// Condition written on every ANP and BANP the controller converts.
const (
	// AdminConditionType says whether the policy is enforced as written.
	AdminConditionType = "Ready"
	// AdminReasonConverted: every part enforced as written.
	AdminReasonConverted = "Converted"
	// AdminReasonFailedClosed: some part could not be expressed and is
	// enforced failing closed (the message says which).
	AdminReasonFailedClosed = "FailedClosed"
)

// AdminPolicy mirrors every AdminNetworkPolicy and the
// BaselineAdminNetworkPolicy into the GlobalNetworkPolicies of the
// adminnetworkpolicy and baselineadminnetworkpolicy tiers (creating the
// tiers), and writes a Ready condition on each object saying whether it
// is enforced as written. Egress nodes peers follow the nodes' addresses.
type AdminPolicy struct {
	*mirror.Mirror
	d       Deps
	client  anpclient.Interface
	factory anpinformers.SharedInformerFactory
	anps    cache.SharedIndexInformer
	banps   cache.SharedIndexInformer
	nodes   cache.SharedIndexInformer
	src     *adminSource
	status  *queue.Queue[adminRef]
	// present says whether the API server serves the CRDs; without them
	// the controller does nothing (and says so).
	present atomic.Bool
	synced  atomic.Bool
}

// adminRef names an ANP (banp false) or the BANP.
type adminRef struct {
	banp bool
	name string
}

// NewAdminPolicy registers the node informer and the ANP and BANP
// informers of its own factory (the CRDs may be missing, and an informer
// of a missing resource would never sync), and returns the controller.
func NewAdminPolicy(d Deps, client anpclient.Interface) *AdminPolicy {
	factory := anpinformers.NewSharedInformerFactory(client, d.Period)
	anpInf := factory.Policy().V1alpha1().AdminNetworkPolicies()
	banpInf := factory.Policy().V1alpha1().BaselineAdminNetworkPolicies()
	nodeInf := d.Informers.Core().V1().Nodes()
	src := &adminSource{anps: anpInf.Lister(), banps: banpInf.Lister(), nodes: nodeInf.Lister(), conditions: map[adminRef]metav1.Condition{}}
	p := &AdminPolicy{d: d, client: client, factory: factory, anps: anpInf.Informer(), banps: banpInf.Informer(),
		nodes: nodeInf.Informer(), src: src, status: queue.New[adminRef]("adminpolicy-status", 50*time.Millisecond, d.Queues)}
	src.converted = p.status.Add
	p.Mirror = mirror.New("adminpolicy", v3.KindGlobalNetworkPolicy, src, d.Store, d.Queues)
	_, _ = p.anps.AddEventHandler(handler(func(_, name string) {
		p.Enqueue(datastore.Key{Kind: v3.KindGlobalNetworkPolicy, Name: k8s.AdminPolicyName(name)})
	}))
	_, _ = p.banps.AddEventHandler(handler(func(_, name string) {
		p.Enqueue(datastore.Key{Kind: v3.KindGlobalNetworkPolicy, Name: k8s.BaselinePolicyName(name)})
	}))
	// A node's addresses or labels change what nodes peers match: every
	// policy with one is reconciled again.
	_, _ = p.nodes.AddEventHandler(handler(func(_, _ string) {
		for _, k := range src.nodeKeys() {
			p.Enqueue(k)
		}
	}))
	return p
}

// Name implements Controller.
func (p *AdminPolicy) Name() string { return "adminnetworkpolicy" }

// HasSynced implements Controller: the node informer only; Run waits for
// its own informers once it knows the CRDs are served.
func (p *AdminPolicy) HasSynced() []cache.InformerSynced {
	return []cache.InformerSynced{p.nodes.HasSynced}
}

// Synced implements Controller.
func (p *AdminPolicy) Synced() bool { return p.synced.Load() && p.Mirror.Synced() }

// Err implements Controller.
func (p *AdminPolicy) Err() error {
	if err := p.Mirror.Err(); err != nil {
		return err
	}
	return p.status.Err()
}

// Run implements Controller: it waits for the CRDs to be served
// (checking every period; until then it counts as synced, having nothing
// to enforce), makes the tiers, then mirrors.
func (p *AdminPolicy) Run(ctx context.Context) {
	logged := false
	for ctx.Err() == nil {
		ok, err := p.served()
		if ok {
			break
		}
		if !logged {
			log.WithError(err).WithField("api", AdminPolicyGroupVersion).Warn(
				"AdminNetworkPolicy CRDs are not installed; AdminNetworkPolicies and BaselineAdminNetworkPolicies are not enforced until they are")
			logged = true
		}
		p.synced.Store(true)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(p.d.Period, 30*time.Second)):
		}
	}
	p.present.Store(true)
	p.synced.Store(false)
	p.factory.Start(ctx.Done())
	defer p.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), p.anps.HasSynced, p.banps.HasSynced) {
		return
	}
	for ctx.Err() == nil {
		err := p.ensureTiers(ctx)
		if err == nil {
			break
		}
		log.WithError(err).Error("Cannot write the adminnetworkpolicy and baselineadminnetworkpolicy tiers; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	p.synced.Store(true)
	p.status.ShutDownOn(ctx)
	go func() {
		for p.status.Process(func(r adminRef) error { return p.writeStatus(ctx, r) }, func(r adminRef, err error) bool {
			log.WithError(err).WithField("policy", r.name).Warn("Cannot write the status of an admin network policy")
			return !apierrors.IsNotFound(err)
		}) {
		}
	}()
	p.Mirror.Run(ctx, p.d.Period)
}

// served asks the API server whether it serves both resources.
func (p *AdminPolicy) served() (bool, error) {
	rl, err := p.client.Discovery().ServerResourcesForGroupVersion(AdminPolicyGroupVersion)
	if err != nil {
		return false, err
	}
	var anp, banp bool
	for _, r := range rl.APIResources {
		anp = anp || r.Name == "adminnetworkpolicies"
		banp = banp || r.Name == "baselineadminnetworkpolicies"
	}
	if !anp || !banp {
		return false, errors.New("adminnetworkpolicies or baselineadminnetworkpolicies not served")
	}
	return true, nil
}

// ensureTiers writes the two tiers as Calico has them, replacing what
// differs.
func (p *AdminPolicy) ensureTiers(ctx context.Context) error {
	for _, want := range k8s.AdminTiers() {
		got, err := p.d.Store.Get(ctx, datastore.Key{Kind: v3.KindTier, Name: want.Name})
		var nf *datastore.NotFoundError
		switch {
		case errors.As(err, &nf):
			if _, err := p.d.Store.Create(ctx, want); err != nil && !errors.As(err, new(*datastore.AlreadyExistsError)) {
				return fmt.Errorf("creating tier %q: %w", want.Name, err)
			}
		case err != nil:
			return fmt.Errorf("reading tier %q: %w", want.Name, err)
		default:
			t := got.(*v3.Tier)
			if t.Spec.Order != nil && *t.Spec.Order == *want.Spec.Order && t.Spec.DefaultAction != nil && *t.Spec.DefaultAction == v3.Pass {
				continue
			}
			t.Spec = want.Spec
			if _, err := p.d.Store.Update(ctx, t); err != nil {
				return fmt.Errorf("updating tier %q: %w", want.Name, err)
			}
		}
	}
	return nil
}

// writeStatus puts the policy's last computed condition on it, when it
// differs from what it carries.
func (p *AdminPolicy) writeStatus(ctx context.Context, r adminRef) error {
	cond, ok := p.src.condition(r)
	if !ok {
		return nil
	}
	if r.banp {
		b, err := p.src.banps.Get(r.name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if cond.ObservedGeneration != b.Generation || !conditionChanged(b.Status.Conditions, cond) {
			return nil
		}
		b = b.DeepCopy()
		meta.SetStatusCondition(&b.Status.Conditions, cond)
		_, err = p.client.PolicyV1alpha1().BaselineAdminNetworkPolicies().UpdateStatus(ctx, b, metav1.UpdateOptions{})
		return err
	}
	a, err := p.src.anps.Get(r.name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cond.ObservedGeneration != a.Generation || !conditionChanged(a.Status.Conditions, cond) {
		return nil
	}
	a = a.DeepCopy()
	meta.SetStatusCondition(&a.Status.Conditions, cond)
	_, err = p.client.PolicyV1alpha1().AdminNetworkPolicies().UpdateStatus(ctx, a, metav1.UpdateOptions{})
	return err
}

// conditionChanged says whether setting c would change conds.
func conditionChanged(conds []metav1.Condition, c metav1.Condition) bool {
	old := meta.FindStatusCondition(conds, c.Type)
	return old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message ||
		old.ObservedGeneration != c.ObservedGeneration
}

type adminSource struct {
	anps  anplisters.AdminNetworkPolicyLister
	banps anplisters.BaselineAdminNetworkPolicyLister
	nodes corelisters.NodeLister
	// converted is told of every conversion, for its status.
	converted func(adminRef)

	mu         sync.Mutex
	conditions map[adminRef]metav1.Condition
	// withNodes are the policies whose last conversion read nodes.
	withNodes map[datastore.Key]bool
}

func (s *adminSource) Owns(k datastore.Key) bool {
	return strings.HasPrefix(k.Name, k8s.AdminPolicyNamePrefix) || strings.HasPrefix(k.Name, k8s.BaselinePolicyNamePrefix)
}

func (s *adminSource) Desired(k datastore.Key) (v3.Resource, error) {
	var (
		ref     adminRef
		pol     *v3.GlobalNetworkPolicy
		cerr    error
		gen     int64
		version string
	)
	usedNodes := false
	nodes := func(sel labels.Selector) []string {
		usedNodes = true
		return s.nodeAddresses(sel)
	}
	if name, ok := strings.CutPrefix(k.Name, k8s.AdminPolicyNamePrefix); ok {
		ref = adminRef{name: name}
		anp, err := s.anps.Get(name)
		if apierrors.IsNotFound(err) {
			s.forget(ref, k)
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		pol, cerr = k8s.AdminNetworkPolicy(anp, nodes)
		gen, version = anp.Generation, anp.ResourceVersion
	} else {
		name := strings.TrimPrefix(k.Name, k8s.BaselinePolicyNamePrefix)
		ref = adminRef{banp: true, name: name}
		banp, err := s.banps.Get(name)
		if apierrors.IsNotFound(err) {
			s.forget(ref, k)
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		pol, cerr = k8s.BaselineAdminNetworkPolicy(banp, nodes)
		gen, version = banp.Generation, banp.ResourceVersion
	}
	cond := metav1.Condition{Type: AdminConditionType, Status: metav1.ConditionTrue, Reason: AdminReasonConverted,
		Message: "enforced as " + k.Name, ObservedGeneration: gen, LastTransitionTime: metav1.Now()}
	if cerr != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, AdminReasonFailedClosed
		cond.Message = "enforced as " + k.Name + ", failing closed where it cannot be expressed: " + cerr.Error()
	}
	s.mu.Lock()
	prev, had := s.conditions[ref]
	s.conditions[ref] = cond
	if s.withNodes == nil {
		s.withNodes = map[datastore.Key]bool{}
	}
	if usedNodes {
		s.withNodes[k] = true
	} else {
		delete(s.withNodes, k)
	}
	s.mu.Unlock()
	if cerr != nil && (!had || prev.Message != cond.Message || prev.ObservedGeneration != gen) {
		log.WithError(cerr).WithFields(log.Fields{"policy": ref.name, "baseline": ref.banp, "resourceVersion": version}).
			Error("Admin network policy cannot be expressed whole; enforcing it failing closed")
	}
	s.converted(ref)
	return pol, nil
}

func (s *adminSource) condition(r adminRef) (metav1.Condition, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.conditions[r]
	return c, ok
}

func (s *adminSource) forget(r adminRef, k datastore.Key) {
	s.mu.Lock()
	delete(s.conditions, r)
	delete(s.withNodes, k)
	s.mu.Unlock()
}

// nodeKeys are the policies to reconcile when a node changes.
func (s *adminSource) nodeKeys() []datastore.Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]datastore.Key, 0, len(s.withNodes))
	for k := range s.withNodes {
		keys = append(keys, k)
	}
	return keys
}

// nodeAddresses are the InternalIP and ExternalIP addresses of the nodes
// sel picks, as host CIDRs, sorted.
func (s *adminSource) nodeAddresses(sel labels.Selector) []string {
	nodes, _ := s.nodes.List(sel)
	var out []string
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				continue
			}
			out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()).String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (s *adminSource) Keys() []datastore.Key {
	anps, _ := s.anps.List(labels.Everything())
	banps, _ := s.banps.List(labels.Everything())
	keys := make([]datastore.Key, 0, len(anps)+len(banps))
	for _, a := range anps {
		keys = append(keys, datastore.Key{Kind: v3.KindGlobalNetworkPolicy, Name: k8s.AdminPolicyName(a.Name)})
	}
	for _, b := range banps {
		keys = append(keys, datastore.Key{Kind: v3.KindGlobalNetworkPolicy, Name: k8s.BaselinePolicyName(b.Name)})
	}
	return keys
}
