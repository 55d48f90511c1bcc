// Package kubeslices reads the Kubernetes EndpointSlices into felix's
// calculation graph, for rules that name a Service: a client-go informer
// is the syncer of this one kind, its events become calc Updates of
// calc.KindEndpointSlice, and one calc.KindEndpointSlicesSynced follows
// once the first list was delivered.
package kubeslices

import (
	"context"
	"net/netip"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/palisade-net/palisade/felix/calc"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/k8s/listwatch"
)

// Source reads every EndpointSlice of the cluster.
type Source struct {
	// Connect makes the Kubernetes client; it is called again (with a
	// growing pause) until it succeeds.
	Connect func() (*listwatch.Client, error)
	Log     *log.Entry
}

// Run sends the slices to out until ctx ends. Until the first list was
// delivered felix keeps rules naming a Service failed closed.
func (s *Source) Run(ctx context.Context, out func([]calc.Update)) {
	logger := s.Log
	if logger == nil {
		logger = log.NewEntry(log.StandardLogger())
	}
	logger = logger.WithField("part", "endpointslices")
	var client *listwatch.Client
	for pause := time.Second; ; pause = min(2*pause, 30*time.Second) {
		c, err := s.Connect()
		if err == nil {
			client = c
			break
		}
		logger.WithError(err).Warn("Cannot reach the Kubernetes API: rules naming a Service stay failed closed")
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
	inf := cache.NewSharedIndexInformer(client.EndpointSlices(), &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	_ = inf.SetTransform(slim)
	send := func(obj any, gone bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj, gone = d.Obj, true
		}
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		u := calc.Update{Key: datastore.Key{Kind: calc.KindEndpointSlice, Namespace: es.Namespace, Name: es.Name}}
		if !gone {
			u.Value = Convert(es)
		}
		out([]calc.Update{u})
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { send(obj, false) },
		UpdateFunc: func(_, obj any) { send(obj, false) },
		DeleteFunc: func(obj any) { send(obj, true) },
	})
	if err != nil {
		logger.WithError(err).Error("Cannot watch EndpointSlices: rules naming a Service stay failed closed")
		return
	}
	done := make(chan struct{})
	go func() { defer close(done); inf.Run(ctx.Done()) }()
	defer func() { <-done }()
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return
	}
	logger.Info("EndpointSlices read: rules naming a Service are enforced")
	out([]calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}}})
	<-ctx.Done()
}

// slim is the informer's transform: the cache keeps only what Convert
// reads of a slice (its name, Service label, address type, endpoint
// addresses and ports), not whole objects with their managed fields,
// annotations, conditions, hints and topology.
func slim(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  listwatch.Meta(s.ObjectMeta),
		AddressType: s.AddressType,
		Ports:       s.Ports,
	}
	if name, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: name}
	}
	if len(s.Endpoints) > 0 {
		out.Endpoints = make([]discoveryv1.Endpoint, len(s.Endpoints))
		for i, ep := range s.Endpoints {
			out.Endpoints[i] = discoveryv1.Endpoint{Addresses: ep.Addresses}
		}
	}
	return out, nil
}

// Convert keeps what felix needs of a slice: its Service (the
// kubernetes.io/service-name label; none for a slice of no Service), the
// addresses of every endpoint (ready or not: a policy names the
// Service's pods, not its serving state) and the ports that have a number
// (a port without one stands for all ports, which a hash:ip,port set
// cannot hold: it matches nothing). FQDN slices have no addresses.
func Convert(s *discoveryv1.EndpointSlice) *calc.EndpointSlice {
	out := &calc.EndpointSlice{
		TypeMeta:   v3.TypeMeta{Kind: calc.KindEndpointSlice},
		ObjectMeta: v3.ObjectMeta{Namespace: s.Namespace, Name: s.Name},
		Service:    s.Labels[discoveryv1.LabelServiceName],
	}
	if s.AddressType == discoveryv1.AddressTypeIPv4 || s.AddressType == discoveryv1.AddressTypeIPv6 {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out.Addresses = append(out.Addresses, ip.Unmap())
				}
			}
		}
	}
	for _, p := range s.Ports {
		if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
			continue
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		switch proto {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			out.Ports = append(out.Ports, calc.ServicePort{Proto: strings.ToLower(string(proto)), Port: uint16(*p.Port)})
		}
	}
	return out
}
