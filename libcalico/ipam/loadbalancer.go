package ipam

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// The attributes and handle of a Service's LoadBalancer address, as the
// loadbalancer controller of calico-kube-controllers writes them: the
// handle names the Service object (namespace, name and UID), the
// attributes its namespace and name and the type LoadBalancer.
const (
	// AttrService is the Service's name; its namespace is in "namespace".
	AttrService = "service"
	// AttrNamespace is the namespace of the pod or Service holding an address.
	AttrNamespace = "namespace"
	// AttrTypeLoadBalancer is the AttrType of a LoadBalancer address.
	AttrTypeLoadBalancer = "LoadBalancer"
	// LoadBalancerHandlePrefix starts the handle of every Service's
	// LoadBalancer addresses.
	LoadBalancerHandlePrefix = "lb-"
)

// LoadBalancerHandle is the IPAM handle of a Service's LoadBalancer
// addresses: one per Service object, so a Service deleted and created
// again under the same name never inherits the old one's addresses.
func LoadBalancerHandle(namespace, name, uid string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name + "/" + uid))
	return LoadBalancerHandlePrefix + hex.EncodeToString(sum[:20])
}

// IsLoadBalancer reports whether the address is a Service's LoadBalancer
// address. Only the loadbalancer controller releases those: pod address
// garbage collection and `ipam check` leave them to it.
func (al Allocation) IsLoadBalancer() bool {
	return strings.HasPrefix(al.HandleID, LoadBalancerHandlePrefix) && al.Attrs[AttrType] == AttrTypeLoadBalancer
}

// LoadBalancerService is the namespace and name of the Service holding a
// LoadBalancer address.
func (al Allocation) LoadBalancerService() (namespace, name string) {
	return al.Attrs[AttrNamespace], al.Attrs[AttrService]
}
