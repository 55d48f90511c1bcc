// Package k8s converts Kubernetes objects into the projectcalico.org/v3
// resources Calico derives from them, exactly as Calico's etcd-datastore
// install does: a NetworkPolicy becomes the NetworkPolicy
// knp.default.<name>, a Namespace the Profile kns.<namespace>, a
// ServiceAccount the Profile ksa.<namespace>.<name>, and a Pod gives its
// WorkloadEndpoint labels, profiles and named ports. It is pure (no
// client, no I/O), so the CNI plugin and calico-kube-controllers share it
// and it is tested without a cluster.
package k8s
