// Package kubepod is the calico plugin's Kubernetes mode: with an API
// server configured (kubernetes.kubeconfig or an API root) and
// policy.type k8s, ADD reads the pod it wires and its namespace, and the
// pod's WorkloadEndpoint gets the pod's labels and Calico's, the
// kns.<namespace> and ksa.<namespace>.<serviceaccount> profiles and the
// pod's named ports, and its floatingIPs as ipNATs (with
// feature_control.floating_ips); the pod's addressing annotations are honoured; once
// wired the pod is annotated with its addresses, as Calico's plugin
// annotates it, and DEL removes them again. host-local's subnet
// "usePodCidr" is replaced by the node's spec.podCIDR.
package kubepod

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"

	"github.com/palisade-net/palisade/cni-plugin/ipamplugin"
	"github.com/palisade-net/palisade/cni-plugin/k8sapi"
	"github.com/palisade-net/palisade/cni-plugin/netconf"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/libcalico/k8s"
)

// Mode is one invocation's Kubernetes side; a nil *Mode is the plugin
// without Kubernetes, and every method is then a no-op.
type Mode struct {
	client *k8sapi.Client
	conf   *netconf.NetConf
	w      netconf.Workload
	// Pod and Namespace are what Read found (policy.type k8s only).
	Pod       *corev1.Pod
	Namespace *corev1.Namespace
	// Addressing is what the pod's annotations ask for.
	Addressing k8s.Addressing
	// ReleasePolicy is the pod's ipReleasePolicy; when it is set, Owner
	// is the StatefulSet its sticky address belongs to.
	ReleasePolicy k8s.ReleasePolicy
	Owner         k8s.StickyOwner
}

// Start returns the invocation's Kubernetes mode, nil when the workload
// is not a pod or no API server is configured. A configuration that
// names an unusable API server is an error.
func Start(conf *netconf.NetConf, w netconf.Workload) (*Mode, error) {
	if !w.IsKubernetes() || !k8sapi.Configured(conf) {
		return nil, nil
	}
	c, err := k8sapi.New(conf)
	if err != nil {
		return nil, err
	}
	return &Mode{client: c, conf: conf, w: w}, nil
}

// ReadsPod says whether the pod is read (policy.type k8s).
func (m *Mode) ReadsPod() bool { return m != nil && m.conf.Policy.Type == "k8s" }

// Read reads the pod and its namespace at once and its addressing
// annotations, checked against the configuration. A pod that does not
// exist fails the ADD before anything is allocated.
func (m *Mode) Read(ctx context.Context) error {
	if !m.ReadsPod() {
		return nil
	}
	var wg sync.WaitGroup
	var nsErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.Namespace, nsErr = m.client.Namespace(ctx, m.w.Namespace)
	}()
	pod, err := m.client.Pod(ctx, m.w.Namespace, m.w.Name)
	wg.Wait()
	if err != nil {
		return err
	}
	if nsErr != nil {
		return nsErr
	}
	m.Pod = pod
	bad := func(err error) error {
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("pod %s/%s: %v", pod.Namespace, pod.Name, err), "")
	}
	a, err := k8s.PodAddressing(pod, m.Namespace)
	if err != nil {
		return bad(err)
	}
	if a.NoIPAM && !m.conf.FeatureControl.IPAddrsNoIpam {
		return bad(fmt.Errorf("requested feature is not enabled: ip_addrs_no_ipam (annotation %s; set feature_control.ip_addrs_no_ipam)", k8s.AnnotationIPAddrsNoIPAM))
	}
	if len(a.Floating) > 0 && !m.conf.FeatureControl.FloatingIPs {
		return bad(fmt.Errorf("requested feature is not enabled: floating_ips (annotation %s; set feature_control.floating_ips)", k8s.AnnotationFloatingIPs))
	}
	if !a.NoIPAM && m.conf.IPAM.Type != "calico-ipam" {
		switch {
		case len(a.Requested) > 0:
			return bad(fmt.Errorf("annotation %s is not compatible with configured IPAM: %s (it needs calico-ipam)", k8s.AnnotationIPAddrs, m.conf.IPAM.Type))
		case len(a.IPv4Pools) > 0 || len(a.IPv6Pools) > 0:
			return bad(fmt.Errorf("the ipv4pools/ipv6pools annotations need calico-ipam, not %s", m.conf.IPAM.Type))
		}
	}
	m.Addressing = a
	if m.ReleasePolicy, err = k8s.PodReleasePolicy(pod); err != nil {
		return bad(err)
	}
	if m.ReleasePolicy != k8s.ReleaseOnStop {
		switch {
		case m.conf.IPAM.Type != "calico-ipam":
			return bad(fmt.Errorf("ipReleasePolicy %q needs calico-ipam, not %s", m.ReleasePolicy, m.conf.IPAM.Type))
		case len(a.Requested) > 0:
			return bad(fmt.Errorf("ipReleasePolicy %q cannot be combined with %s or %s", m.ReleasePolicy, k8s.AnnotationIPAddrs, k8s.AnnotationIPAddrsNoIPAM))
		}
		if m.Owner, err = k8s.PodStickyOwner(pod); err != nil {
			return bad(err)
		}
	}
	return nil
}

// Decorate gives ep what the pod says: its labels (with Calico's), its
// namespace's and service account's profiles, its named ports, its
// service account and, from the floatingIPs annotation, its ipNATs
// (addrs are the pod's addresses). A floating address of a family the
// pod has no address of is an error.
func (m *Mode) Decorate(ep *v3.WorkloadEndpoint, addrs []netip.Addr) error {
	if m == nil || m.Pod == nil {
		return nil
	}
	nats, err := k8s.IPNATs(m.Addressing.Floating, addrs)
	if err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("pod %s/%s: %v", m.Pod.Namespace, m.Pod.Name, err), "")
	}
	ep.Labels = k8s.PodLabels(m.Pod)
	ep.Spec.Profiles = k8s.PodProfiles(m.Pod)
	ep.Spec.Ports = k8s.PodPorts(m.Pod)
	ep.Spec.ServiceAccountName = m.Pod.Spec.ServiceAccountName
	for _, n := range nats {
		ep.Spec.IPNATs = append(ep.Spec.IPNATs, v3.IPNAT{InternalIP: n[0].String(), ExternalIP: n[1].String()})
	}
	return nil
}

// Annotate writes the pod's address annotations (podIP, podIPs,
// containerID), as Calico does once the pod is wired.
func (m *Mode) Annotate(ctx context.Context, containerID string, addrs []netip.Addr) error {
	if !m.ReadsPod() {
		return nil
	}
	return m.client.AnnotatePod(ctx, m.w.Namespace, m.w.Name, k8s.PodIPAnnotations(containerID, addrs))
}

// Unannotate removes the address annotations while they still belong to
// containerID (DEL, or undoing a failed ADD).
func (m *Mode) Unannotate(ctx context.Context, containerID string) error {
	if !m.ReadsPod() {
		return nil
	}
	return m.client.RemovePodAnnotations(ctx, m.w.Namespace, m.w.Name, k8s.AnnotationContainerID, containerID,
		k8s.AnnotationPodIP, k8s.AnnotationPodIPs, k8s.AnnotationContainerID)
}

// NodeName is the Kubernetes node the pod runs on.
func (m *Mode) NodeName() string {
	if m.conf.Kubernetes.NodeName != "" {
		return m.conf.Kubernetes.NodeName
	}
	return m.w.Node
}

// Sticky is the sticky reservation the pod uses, from its release
// policy and owner (ReleasePolicy set).
func (m *Mode) Sticky() *ipamplugin.Sticky {
	return &ipamplugin.Sticky{
		Handle: ipam.StickyHandleID(m.conf.Name, m.Pod.Namespace, m.Owner.Kind, m.Owner.Name, m.Pod.Name),
		Attrs: map[string]string{ipam.AttrReleasePolicy: string(m.ReleasePolicy), ipam.AttrOwnerKind: m.Owner.Kind,
			ipam.AttrOwnerName: m.Owner.Name, ipam.AttrOwnerUID: m.Owner.UID, ipam.AttrPodUID: string(m.Pod.UID)},
	}
}
