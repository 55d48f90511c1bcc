package controllers

import (
	"context"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/palisade-net/palisade/kube-controllers/mirror"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/k8s"
)

// Profiles mirrors Kubernetes objects into Profiles: the namespace
// controller's kns.<namespace> or the serviceaccount controller's
// ksa.<namespace>.<name>.
type Profiles struct {
	*mirror.Mirror
	name   string
	synced cache.InformerSynced
	period time.Duration
}

// Name implements Controller.
func (p *Profiles) Name() string { return p.name }

// HasSynced implements Controller.
func (p *Profiles) HasSynced() []cache.InformerSynced { return []cache.InformerSynced{p.synced} }

// Run implements Controller.
func (p *Profiles) Run(ctx context.Context) { p.Mirror.Run(ctx, p.period) }

// NewNamespace registers the Namespace informer and returns the
// namespace controller.
func NewNamespace(d Deps) *Profiles {
	inf := d.Informers.Core().V1().Namespaces()
	p := &Profiles{name: "namespace", synced: inf.Informer().HasSynced, period: d.Period}
	p.Mirror = mirror.New(p.name, v3.KindProfile, namespaceSource{inf.Lister()}, d.Store, d.Queues)
	_, _ = inf.Informer().AddEventHandler(handler(func(_, name string) {
		p.Enqueue(datastore.Key{Kind: v3.KindProfile, Name: k8s.NamespaceProfileName(name)})
	}))
	return p
}

type namespaceSource struct{ lister corelisters.NamespaceLister }

func (s namespaceSource) Owns(k datastore.Key) bool {
	return strings.HasPrefix(k.Name, k8s.NamespaceProfilePrefix)
}

func (s namespaceSource) Desired(k datastore.Key) (v3.Resource, error) {
	ns, err := s.lister.Get(strings.TrimPrefix(k.Name, k8s.NamespaceProfilePrefix))
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return k8s.NamespaceProfile(ns), nil
}

func (s namespaceSource) Keys() []datastore.Key {
	nss, _ := s.lister.List(labels.Everything())
	keys := make([]datastore.Key, 0, len(nss))
	for _, ns := range nss {
		keys = append(keys, datastore.Key{Kind: v3.KindProfile, Name: k8s.NamespaceProfileName(ns.Name)})
	}
	return keys
}

// NewServiceAccount registers the ServiceAccount informer and returns
// the serviceaccount controller.
func NewServiceAccount(d Deps) *Profiles {
	inf := d.Informers.Core().V1().ServiceAccounts()
	p := &Profiles{name: "serviceaccount", synced: inf.Informer().HasSynced, period: d.Period}
	p.Mirror = mirror.New(p.name, v3.KindProfile, serviceAccountSource{inf.Lister()}, d.Store, d.Queues)
	_, _ = inf.Informer().AddEventHandler(handler(func(ns, name string) {
		p.Enqueue(datastore.Key{Kind: v3.KindProfile, Name: k8s.ServiceAccountProfileName(ns, name)})
	}))
	return p
}

type serviceAccountSource struct {
	lister corelisters.ServiceAccountLister
}

func (s serviceAccountSource) Owns(k datastore.Key) bool {
	return strings.HasPrefix(k.Name, k8s.ServiceAccountProfilePrefix)
}

func (s serviceAccountSource) Desired(k datastore.Key) (v3.Resource, error) {
	ns, name, ok := k8s.ParseServiceAccountProfileName(k.Name)
	if !ok {
		return nil, nil // not one a service account could have: not ours to keep
	}
	sa, err := s.lister.ServiceAccounts(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return k8s.ServiceAccountProfile(sa), nil
}

func (s serviceAccountSource) Keys() []datastore.Key {
	sas, _ := s.lister.List(labels.Everything())
	keys := make([]datastore.Key, 0, len(sas))
	for _, sa := range sas {
		keys = append(keys, datastore.Key{Kind: v3.KindProfile, Name: k8s.ServiceAccountProfileName(sa.Namespace, sa.Name)})
	}
	return keys
}
