package controllers

import (
	"context"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/palisade-net/palisade/kube-controllers/mirror"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/k8s"
)

// Policy mirrors every networking.k8s.io/v1 NetworkPolicy into the
// Calico NetworkPolicy knp.default.<name> of its namespace.
type Policy struct {
	*mirror.Mirror
	synced cache.InformerSynced
	period time.Duration
}

// NewPolicy registers the NetworkPolicy informer and returns the
// controller.
func NewPolicy(d Deps) *Policy {
	inf := d.Informers.Networking().V1().NetworkPolicies()
	src := &policySource{lister: inf.Lister(), warned: map[string]string{}}
	p := &Policy{Mirror: mirror.New("policy", v3.KindNetworkPolicy, src, d.Store, d.Queues), synced: inf.Informer().HasSynced, period: d.Period}
	_, _ = inf.Informer().AddEventHandler(handler(func(ns, name string) {
		p.Enqueue(datastore.Key{Kind: v3.KindNetworkPolicy, Namespace: ns, Name: k8s.PolicyName(name)})
	}))
	return p
}

// Name implements Controller.
func (p *Policy) Name() string { return "policy" }

// HasSynced implements Controller.
func (p *Policy) HasSynced() []cache.InformerSynced { return []cache.InformerSynced{p.synced} }

// Run implements Controller.
func (p *Policy) Run(ctx context.Context) { p.Mirror.Run(ctx, p.period) }

type policySource struct {
	lister networkinglisters.NetworkPolicyLister
	// warned remembers, per policy, the conversion error last logged.
	mu     sync.Mutex
	warned map[string]string
}

func (s *policySource) Owns(k datastore.Key) bool {
	_, ok := k8s.IsPolicyName(k.Name)
	return ok
}

func (s *policySource) Desired(k datastore.Key) (v3.Resource, error) {
	name, _ := k8s.IsPolicyName(k.Name)
	np, err := s.lister.NetworkPolicies(k.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pol, cerr := k8s.NetworkPolicy(np)
	s.mu.Lock()
	id := k.Namespace + "/" + name
	if cerr != nil && s.warned[id] != np.ResourceVersion {
		log.WithError(cerr).WithField("networkpolicy", id).Error("NetworkPolicy cannot be converted; its pods get deny-all in its directions")
		s.warned[id] = np.ResourceVersion
	} else if cerr == nil {
		delete(s.warned, id)
	}
	s.mu.Unlock()
	return pol, nil
}

func (s *policySource) Keys() []datastore.Key {
	nps, _ := s.lister.List(labels.Everything())
	keys := make([]datastore.Key, 0, len(nps))
	for _, np := range nps {
		keys = append(keys, datastore.Key{Kind: v3.KindNetworkPolicy, Namespace: np.Namespace, Name: k8s.PolicyName(np.Name)})
	}
	return keys
}
