// Package kubeslices reads the Kubernetes EndpointSlices and Services into
// felix's calculation graph, for rules that name a Service and for the
// eBPF dataplane's load balancer: client-go informers are the syncer of
// these two kinds, their events become calc Updates of
// calc.KindEndpointSlice and calc.KindService, and one
// calc.KindEndpointSlicesSynced follows once both first lists were
// delivered.
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
	svcInf := cache.NewSharedIndexInformer(client.Services(), &corev1.Service{}, 0, cache.Indexers{})
	_ = svcInf.SetTransform(slimService)
	sendSvc := func(obj any, gone bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj, gone = d.Obj, true
		}
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return
		}
		u := calc.Update{Key: datastore.Key{Kind: calc.KindService, Namespace: svc.Namespace, Name: svc.Name}}
		if !gone {
			u.Value = ConvertService(svc)
		}
		out([]calc.Update{u})
	}
	svcReg, err := svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { sendSvc(obj, false) },
		UpdateFunc: func(_, obj any) { sendSvc(obj, false) },
		DeleteFunc: func(obj any) { sendSvc(obj, true) },
	})
	if err != nil {
		logger.WithError(err).Error("Cannot watch Services: rules naming a Service stay failed closed")
		return
	}
	done := make(chan struct{}, 2)
	go func() { defer func() { done <- struct{}{} }(); inf.Run(ctx.Done()) }()
	go func() { defer func() { done <- struct{}{} }(); svcInf.Run(ctx.Done()) }()
	defer func() { <-done; <-done }()
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced, svcReg.HasSynced) {
		return
	}
	logger.Info("EndpointSlices read: rules naming a Service are enforced")
	out([]calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}}})
	<-ctx.Done()
}

// slim is the informer's transform: the cache keeps only what Convert
// reads of a slice (its name, Service label, address type, endpoint
// addresses and conditions, and ports), not whole objects with their managed fields,
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
			out.Endpoints[i] = discoveryv1.Endpoint{Addresses: ep.Addresses, Conditions: ep.Conditions, NodeName: ep.NodeName}
		}
	}
	return out, nil
}

// slimService is the Service informer's transform: the cache keeps only
// what ConvertService reads (type, addresses, ports, traffic policies,
// session affinity, the load balancer's ingress addresses and Calico's
// Maglev annotation).
func slimService(obj any) (any, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	out := &corev1.Service{
		ObjectMeta: listwatch.Meta(s.ObjectMeta),
		Spec: corev1.ServiceSpec{
			Type: s.Spec.Type, ClusterIP: s.Spec.ClusterIP, ClusterIPs: s.Spec.ClusterIPs, Ports: s.Spec.Ports,
			ExternalIPs: s.Spec.ExternalIPs, ExternalTrafficPolicy: s.Spec.ExternalTrafficPolicy,
			InternalTrafficPolicy: s.Spec.InternalTrafficPolicy, SessionAffinity: s.Spec.SessionAffinity,
			SessionAffinityConfig: s.Spec.SessionAffinityConfig,
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: s.Status.LoadBalancer.Ingress}},
	}
	if v, ok := s.Annotations[ExternalTrafficStrategyAnnotation]; ok {
		out.Annotations = map[string]string{ExternalTrafficStrategyAnnotation: v}
	}
	return out, nil
}

// ExternalTrafficStrategyAnnotation is Calico's annotation that gives a
// Service's external traffic Maglev consistent hashing (value "maglev").
const ExternalTrafficStrategyAnnotation = "lb.projectcalico.org/external-traffic-strategy"

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
			c := ep.Conditions
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out.Addresses = append(out.Addresses, ip.Unmap())
					e := calc.SliceEndpoint{
						Addr: ip.Unmap(), Ready: c.Ready == nil || *c.Ready, Serving: c.Serving == nil || *c.Serving,
						Terminating: c.Terminating != nil && *c.Terminating,
					}
					if ep.NodeName != nil {
						e.NodeName = *ep.NodeName
					}
					out.Endpoints = append(out.Endpoints, e)
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
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			out.Ports = append(out.Ports, calc.ServicePort{Name: name, Proto: strings.ToLower(string(proto)), Port: uint16(*p.Port)})
		}
	}
	return out
}

// ConvertService keeps what the load balancer needs of a Service: its
// type, cluster, external and load balancer addresses (none for an
// ExternalName Service), its ports of TCP, UDP and SCTP with their node
// ports, its traffic policies, session affinity and whether Calico's
// Maglev annotation asks for consistent hashing.
func ConvertService(s *corev1.Service) *calc.Service {
	out := &calc.Service{
		TypeMeta:   v3.TypeMeta{Kind: calc.KindService},
		ObjectMeta: v3.ObjectMeta{Namespace: s.Namespace, Name: s.Name},
	}
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		return out
	}
	switch s.Spec.Type {
	case corev1.ServiceTypeNodePort:
		out.Type = calc.ServiceNodePort
	case corev1.ServiceTypeLoadBalancer:
		out.Type = calc.ServiceLoadBalancer
	default:
		out.Type = calc.ServiceClusterIP
	}
	addrs := func(in []string) []netip.Addr {
		var out []netip.Addr
		for _, a := range in {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, ip.Unmap())
			}
		}
		return out
	}
	ips := s.Spec.ClusterIPs
	if len(ips) == 0 && s.Spec.ClusterIP != "" {
		ips = []string{s.Spec.ClusterIP}
	}
	out.ClusterIPs = addrs(ips)
	out.ExternalIPs = addrs(s.Spec.ExternalIPs)
	for _, in := range s.Status.LoadBalancer.Ingress {
		out.LoadBalancerIPs = append(out.LoadBalancerIPs, addrs([]string{in.IP})...)
	}
	out.ExternalLocal = s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	out.InternalLocal = s.Spec.InternalTrafficPolicy != nil && *s.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	if s.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		out.AffinitySeconds = calc.DefaultAffinitySeconds
		if c := s.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
			out.AffinitySeconds = uint32(*c.ClientIP.TimeoutSeconds)
		}
	}
	out.Maglev = strings.EqualFold(s.Annotations[ExternalTrafficStrategyAnnotation], "maglev")
	for _, p := range s.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		switch proto {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			if p.Port >= 1 && p.Port <= 65535 {
				sp := calc.ServiceSpecPort{Name: p.Name, Proto: strings.ToLower(string(proto)), Port: uint16(p.Port)}
				if p.NodePort >= 1 && p.NodePort <= 65535 {
					sp.NodePort = uint16(p.NodePort)
				}
				out.Ports = append(out.Ports, sp)
			}
		}
	}
	return out
}
