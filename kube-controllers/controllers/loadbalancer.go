package controllers

import (
	"context"
	"encoding/json"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/palisade-net/palisade/kube-controllers/queue"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// The Service annotations Calico's LoadBalancer IPAM reads; each holds a
// JSON list.
const (
	AnnotationLoadBalancerIPs = "projectcalico.org/loadBalancerIPs"
	AnnotationIPv4Pools       = "projectcalico.org/ipv4pools"
	AnnotationIPv6Pools       = "projectcalico.org/ipv6pools"
	// LoadBalancerClass is the spec.loadBalancerClass served besides none.
	LoadBalancerClass = "calico"
	// The Event reasons written on a Service.
	ReasonAllocationFailed = "LoadBalancerIPAllocationFailed"
	ReasonInvalidRequest   = "LoadBalancerInvalidRequest"
	ReasonAllocated        = "LoadBalancerIPAllocated"
)

// AssignIPs values of spec.controllers.loadBalancer.assignIPs.
const (
	AssignAllServices   = "AllServices"
	AssignRequestedOnly = "RequestedServicesOnly"
)

// LoadBalancerOptions configure the loadbalancer controller.
type LoadBalancerOptions struct {
	// AssignIPs is AllServices or RequestedServicesOnly.
	AssignIPs string
	// Allocated, when set, is kept at the number of addresses held.
	Allocated func(float64)
}

// LoadBalancer assigns the addresses of Services of type LoadBalancer
// from IP pools allowing the LoadBalancer use, writes them into the
// Services' status, and releases them when a Service goes or stops being
// served. The addresses of a Service are held by one IPAM handle derived
// from its namespace, name and UID, with attributes naming the Service,
// so a restarted controller finds what each Service holds in IPAM.
type LoadBalancer struct {
	client kubernetes.Interface
	lister corelisters.ServiceLister
	synced cache.InformerSynced
	alloc  *ipam.Allocator
	store  datastore.Interface
	opts   LoadBalancerOptions
	period time.Duration
	queue  *queue.Queue[string]
	mu     sync.Mutex
	held   map[string]map[string][]netip.Addr // namespace/name → handle → addresses
	events map[string]string                  // namespace/name → last warning written
	done   atomic.Bool
	writes atomic.Int64
}

// NewLoadBalancer registers the Service informer and returns the
// loadbalancer controller.
func NewLoadBalancer(d Deps, o LoadBalancerOptions) *LoadBalancer {
	inf := d.Informers.Core().V1().Services()
	c := &LoadBalancer{client: d.Client, lister: inf.Lister(), synced: inf.Informer().HasSynced,
		alloc: ipam.New(d.Store, d.KV), store: d.Store, opts: o, period: d.Period,
		held: map[string]map[string][]netip.Addr{}, events: map[string]string{}}
	c.queue = queue.New[string]("loadbalancer", 50*time.Millisecond, d.Queues)
	_, _ = inf.Informer().AddEventHandler(handler(func(ns, name string) { c.queue.Add(ns + "/" + name) }))
	return c
}

// Name implements Controller.
func (c *LoadBalancer) Name() string { return "loadbalancer" }

// HasSynced implements Controller.
func (c *LoadBalancer) HasSynced() []cache.InformerSynced { return []cache.InformerSynced{c.synced} }

// Synced implements Controller.
func (c *LoadBalancer) Synced() bool { return c.done.Load() }

// Err implements Controller.
func (c *LoadBalancer) Err() error { return c.queue.Err() }

// Writes is how many IPAM and status writes the controller made.
func (c *LoadBalancer) Writes() int64 { return c.writes.Load() }

// Run implements Controller: it reads what IPAM holds for Services, then
// reconciles every Service and every holder, again each period.
func (c *LoadBalancer) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	for ctx.Err() == nil {
		if err := c.scan(ctx); err != nil {
			c.queue.SetErr(err)
			log.WithError(err).Warn("Reading the LoadBalancer addresses from IPAM failed; retrying")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		break
	}
	c.enqueueAll()
	reconcile := func(key string) error { return c.reconcile(ctx, key) }
	failed := func(key string, err error) bool {
		if ctx.Err() != nil {
			return false
		}
		log.WithError(err).WithField("service", key).Warn("LoadBalancer addresses not settled; retrying")
		return true
	}
	for range 4 {
		go func() {
			for c.queue.Process(reconcile, failed) {
			}
		}()
	}
	go func() {
		for ctx.Err() == nil && !c.done.Load() {
			if c.queue.Len() == 0 {
				c.done.Store(true)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	queue.Every(ctx, c.period, func() {
		if err := c.scan(ctx); err != nil {
			c.queue.SetErr(err)
			log.WithError(err).Warn("Reading the LoadBalancer addresses from IPAM failed")
		}
		c.enqueueAll()
	})
}

// scan adds to what the controller knows every LoadBalancer address in
// IPAM (what it released meanwhile is released again harmlessly).
func (c *LoadBalancer) scan(ctx context.Context) error {
	blocks, err := c.alloc.ListBlocks(ctx)
	if err != nil {
		return fmt.Errorf("listing IPAM blocks: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range blocks {
		for _, al := range b.Allocations {
			if !al.IsLoadBalancer() {
				continue
			}
			ns, name := al.LoadBalancerService()
			key := ns + "/" + name
			if !slices.Contains(c.held[key][al.HandleID], al.IP) {
				c.add(key, al.HandleID, al.IP)
			}
		}
	}
	c.report()
	return nil
}

// add records an address; c.mu is held.
func (c *LoadBalancer) add(key, handle string, ip netip.Addr) {
	if c.held[key] == nil {
		c.held[key] = map[string][]netip.Addr{}
	}
	c.held[key][handle] = append(c.held[key][handle], ip)
	slices.SortFunc(c.held[key][handle], netip.Addr.Compare)
}

// report updates the allocations gauge; c.mu is held.
func (c *LoadBalancer) report() {
	if c.opts.Allocated == nil {
		return
	}
	n := 0
	for _, hs := range c.held {
		for _, ips := range hs {
			n += len(ips)
		}
	}
	c.opts.Allocated(float64(n))
}

func (c *LoadBalancer) enqueueAll() {
	svcs, _ := c.lister.List(labels.Everything())
	for _, s := range svcs {
		c.queue.Add(s.Namespace + "/" + s.Name)
	}
	c.mu.Lock()
	for key := range c.held {
		c.queue.Add(key)
	}
	c.mu.Unlock()
}

// handleFor is the IPAM handle of a Service's addresses.
func handleFor(svc *corev1.Service) string {
	return ipam.LoadBalancerHandle(svc.Namespace, svc.Name, string(svc.UID))
}

// served reports whether the controller assigns the Service's addresses.
func (c *LoadBalancer) served(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil {
		return false
	}
	if cl := svc.Spec.LoadBalancerClass; cl != nil && *cl != LoadBalancerClass {
		return false
	}
	if c.opts.AssignIPs == AssignRequestedOnly {
		a := svc.Annotations
		return a[AnnotationLoadBalancerIPs] != "" || a[AnnotationIPv4Pools] != "" || a[AnnotationIPv6Pools] != ""
	}
	return true
}

// request is what a Service's annotations ask for.
type request struct {
	ips        []netip.Addr
	v4p, v6p   []string
	hasRequest bool
}

func parseRequest(svc *corev1.Service) (request, error) {
	var r request
	list := func(name string) ([]string, error) {
		v, ok := svc.Annotations[name]
		if !ok || v == "" {
			return nil, nil
		}
		var out []string
		if err := json.Unmarshal([]byte(v), &out); err != nil {
			return nil, fmt.Errorf("annotation %s %q: want a JSON list of strings: %w", name, v, err)
		}
		return out, nil
	}
	ips, err := list(AnnotationLoadBalancerIPs)
	if err != nil {
		return r, err
	}
	n4, n6 := 0, 0
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return r, fmt.Errorf("annotation %s: %q is not an IP address", AnnotationLoadBalancerIPs, s)
		}
		a = a.Unmap()
		if a.Is4() {
			n4++
		} else {
			n6++
		}
		r.ips = append(r.ips, a)
	}
	if n4 > 1 || n6 > 1 {
		return r, fmt.Errorf("annotation %s: at most one IPv4 and one IPv6 address, got %d and %d", AnnotationLoadBalancerIPs, n4, n6)
	}
	if r.v4p, err = list(AnnotationIPv4Pools); err != nil {
		return r, err
	}
	if r.v6p, err = list(AnnotationIPv6Pools); err != nil {
		return r, err
	}
	r.hasRequest = len(r.ips) > 0 || len(r.v4p) > 0 || len(r.v6p) > 0
	return r, nil
}

// reconcile settles one Service's addresses and status.
func (c *LoadBalancer) reconcile(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	svc, err := c.lister.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		svc = nil
	} else if err != nil {
		return err
	}
	c.mu.Lock()
	held := map[string][]netip.Addr{}
	for h, ips := range c.held[key] {
		held[h] = slices.Clone(ips)
	}
	c.mu.Unlock()

	if svc == nil && len(held) > 0 {
		// Release only once the API server itself says the Service is
		// gone: a cache behind it must never take a Service's address.
		live, err := c.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			svc = live
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("confirming service %s is gone: %w", key, err)
		}
	}
	if svc == nil || !c.served(svc) {
		var ours []netip.Addr
		for h, ips := range held {
			ours = append(ours, ips...)
			if err := c.releaseHandle(ctx, key, h); err != nil {
				return err
			}
		}
		if svc != nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer && len(ours) > 0 {
			var keep []corev1.LoadBalancerIngress
			for _, in := range svc.Status.LoadBalancer.Ingress {
				if a, err := netip.ParseAddr(in.IP); err != nil || !slices.Contains(ours, a) {
					keep = append(keep, in)
				}
			}
			return c.writeStatus(ctx, svc, keep)
		}
		c.clearEvent(key)
		return nil
	}
	handle := handleFor(svc)
	for h := range held {
		if h != handle {
			if err := c.releaseHandle(ctx, key, h); err != nil {
				return err
			}
		}
	}
	have := held[handle]
	req, err := parseRequest(svc)
	if err != nil {
		c.warn(ctx, svc, ReasonInvalidRequest, err.Error())
		return nil // an update of the Service brings it back
	}
	pools, err := c.lbPools(ctx)
	if err != nil {
		return err
	}
	families := map[int]bool{}
	for _, f := range svc.Spec.IPFamilies {
		families[map[corev1.IPFamily]int{corev1.IPv4Protocol: 4, corev1.IPv6Protocol: 6}[f]] = true
	}
	if len(families) == 0 {
		families[4] = true
	}
	// Release what no longer fits the request.
	var drop []netip.Addr
	for _, a := range have {
		ok := true
		switch {
		case len(req.ips) > 0:
			ok = slices.Contains(req.ips, a)
		case len(req.v4p) > 0 || len(req.v6p) > 0:
			ok = inPools(pools, a, req.v4p) || inPools(pools, a, req.v6p)
		default:
			p, found := poolOf(pools, a)
			ok = found && !(p.Spec.AssignmentMode != nil && *p.Spec.AssignmentMode == v3.AssignmentManual)
			ok = ok && families[version(a)]
		}
		if !ok {
			drop = append(drop, a)
		}
	}
	for _, a := range drop {
		if err := c.releaseAddr(ctx, key, handle, a); err != nil {
			return err
		}
		have = slices.DeleteFunc(have, func(b netip.Addr) bool { return b == a })
	}
	hasFamily := func(v int) bool { return slices.ContainsFunc(have, func(a netip.Addr) bool { return version(a) == v }) }
	attrs := map[string]string{ipam.AttrService: svc.Name, ipam.AttrNamespace: svc.Namespace, ipam.AttrType: ipam.AttrTypeLoadBalancer,
		"timestamp": time.Now().UTC().Format(time.RFC3339)}
	var failure error
	if len(req.ips) > 0 {
		for _, a := range req.ips {
			if slices.Contains(have, a) {
				continue
			}
			err := c.alloc.AssignIP(ctx, ipam.AssignIPArgs{IP: a, HandleID: handle, Attrs: attrs, Hostname: ipam.LoadBalancerHost, Intent: ipam.IntentLoadBalancer})
			if err != nil {
				failure = errors.Join(failure, err)
				continue
			}
			c.writes.Add(1)
			have = append(have, a)
			c.record(key, handle, a)
		}
	} else {
		args := ipam.AutoAssignArgs{HandleID: handle, Attrs: attrs, Hostname: ipam.LoadBalancerHost, Intent: ipam.IntentLoadBalancer,
			IPv4Pools: req.v4p, IPv6Pools: req.v6p, MaxBlocksPerHost: 1 << 20}
		if families[4] && !hasFamily(4) {
			args.Num4 = 1
		}
		if families[6] && !hasFamily(6) {
			args.Num6 = 1
		}
		if args.Num4+args.Num6 > 0 {
			v4, v6, err := c.alloc.AutoAssign(ctx, args)
			for _, as := range []*ipam.Assignments{v4, v6} {
				if as == nil {
					continue
				}
				for _, p := range as.IPs {
					c.writes.Add(1)
					have = append(have, p.Addr())
					c.record(key, handle, p.Addr())
				}
			}
			failure = err
		}
	}
	if failure != nil {
		msg := "no address assigned: " + failure.Error()
		switch {
		case errors.Is(failure, ipam.ErrExhausted):
			msg = "no free address in the LoadBalancer IP pools: " + failure.Error()
		case errors.Is(failure, ipam.ErrNoPools), errors.Is(failure, ipam.ErrPoolNotUsable), errors.Is(failure, ipam.ErrNotInPool):
			msg = "no IP pool with allowedUses LoadBalancer can serve this Service: " + failure.Error()
		case errors.Is(failure, ipam.ErrAlreadyAssigned):
			msg = "the requested address is in use: " + failure.Error()
		}
		c.warn(ctx, svc, ReasonAllocationFailed, msg)
	} else {
		c.clearEvent(key)
	}
	slices.SortFunc(have, func(a, b netip.Addr) int {
		if version(a) != version(b) {
			return version(a) - version(b)
		}
		return a.Compare(b)
	})
	ingress := make([]corev1.LoadBalancerIngress, 0, len(have))
	for _, a := range have {
		ingress = append(ingress, corev1.LoadBalancerIngress{IP: a.String()})
	}
	if err := c.writeStatus(ctx, svc, ingress); err != nil {
		return err
	}
	if failure != nil && !errors.Is(failure, ipam.ErrInvalid) {
		return fmt.Errorf("service %s: %w", key, failure)
	}
	return nil
}

func version(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// lbPools lists the pools allowing the LoadBalancer use.
func (c *LoadBalancer) lbPools(ctx context.Context) ([]*v3.IPPool, error) {
	rs, _, err := c.store.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		return nil, fmt.Errorf("listing IP pools: %w", err)
	}
	var out []*v3.IPPool
	for _, r := range rs {
		if p := r.(*v3.IPPool); slices.Contains(p.Spec.AllowedUses, v3.IPPoolAllowedUseLoadBalancer) {
			out = append(out, p)
		}
	}
	return out, nil
}

func poolOf(pools []*v3.IPPool, a netip.Addr) (*v3.IPPool, bool) {
	for _, p := range pools {
		if cidr, err := netip.ParsePrefix(p.Spec.CIDR); err == nil && cidr.Contains(a) {
			return p, true
		}
	}
	return nil, false
}

func inPools(pools []*v3.IPPool, a netip.Addr, names []string) bool {
	for _, n := range names {
		if cidr, err := netip.ParsePrefix(n); err == nil && cidr.Masked().Contains(a) {
			return true
		}
		for _, p := range pools {
			if p.Name == n {
				if cidr, err := netip.ParsePrefix(p.Spec.CIDR); err == nil && cidr.Contains(a) {
					return true
				}
			}
		}
	}
	return false
}

func (c *LoadBalancer) record(key, handle string, a netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.held[key][handle], a) {
		c.add(key, handle, a)
	}
	c.report()
}

func (c *LoadBalancer) releaseHandle(ctx context.Context, key, handle string) error {
	if err := c.alloc.ReleaseByHandle(ctx, handle); err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return fmt.Errorf("service %s: releasing handle %s: %w", key, handle, err)
	}
	c.writes.Add(1)
	log.WithFields(log.Fields{"service": key, "handle": handle}).Info("Released the LoadBalancer addresses of a Service that is gone or no longer served")
	c.mu.Lock()
	delete(c.held[key], handle)
	if len(c.held[key]) == 0 {
		delete(c.held, key)
	}
	c.report()
	c.mu.Unlock()
	return nil
}

func (c *LoadBalancer) releaseAddr(ctx context.Context, key, handle string, a netip.Addr) error {
	if _, err := c.alloc.Release(ctx, ipam.ReleaseOptions{Address: a, Handle: handle}); err != nil {
		return fmt.Errorf("service %s: releasing %s: %w", key, a, err)
	}
	c.writes.Add(1)
	log.WithFields(log.Fields{"service": key, "ip": a}).Info("Released a LoadBalancer address the Service no longer asks for")
	c.mu.Lock()
	c.held[key][handle] = slices.DeleteFunc(c.held[key][handle], func(b netip.Addr) bool { return b == a })
	c.report()
	c.mu.Unlock()
	return nil
}

// writeStatus sets status.loadBalancer.ingress when it differs.
func (c *LoadBalancer) writeStatus(ctx context.Context, svc *corev1.Service, ingress []corev1.LoadBalancerIngress) error {
	cur := svc.Status.LoadBalancer.Ingress
	if slices.EqualFunc(cur, ingress, func(a, b corev1.LoadBalancerIngress) bool { return a.IP == b.IP && a.Hostname == b.Hostname }) {
		return nil
	}
	if ingress == nil {
		ingress = []corev1.LoadBalancerIngress{}
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": ingress}}})
	_, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("service %s/%s: writing status.loadBalancer: %w", svc.Namespace, svc.Name, err)
	}
	c.writes.Add(1)
	log.WithFields(log.Fields{"service": svc.Namespace + "/" + svc.Name, "ingress": ingress}).Info("LoadBalancer status written")
	return nil
}

// warn logs a failure and writes it as a Warning Event on the Service,
// once per distinct message.
func (c *LoadBalancer) warn(ctx context.Context, svc *corev1.Service, reason, msg string) {
	key := svc.Namespace + "/" + svc.Name
	log.WithFields(log.Fields{"service": key, "reason": reason}).Warn(msg)
	c.mu.Lock()
	same := c.events[key] == reason+msg
	c.events[key] = reason + msg
	c.mu.Unlock()
	if same {
		return
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: svc.Name + ".", Namespace: svc.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name,
			UID: svc.UID, ResourceVersion: svc.ResourceVersion},
		Reason: reason, Message: msg, Type: corev1.EventTypeWarning, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "calico-kube-controllers"},
	}
	if _, err := c.client.CoreV1().Events(svc.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		log.WithError(err).WithField("service", key).Warn("Writing an Event failed")
	}
}

func (c *LoadBalancer) clearEvent(key string) {
	c.mu.Lock()
	delete(c.events, key)
	c.mu.Unlock()
}
