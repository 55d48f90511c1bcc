// Package kubecontrollers is calico-kube-controllers: it keeps the
// Calico resources that Kubernetes objects imply in etcd (Calico's
// etcd-datastore install) through client-go informers. Run elects a
// leader through a coordination.k8s.io Lease, reads (and creates) the
// KubeControllersConfiguration "default", runs the enabled controllers
// (policy, namespace, serviceaccount, workloadendpoint, node with IPAM
// garbage collection), writes the configuration's status and serves
// health on a port. See docs/kubernetes.md.
package kubecontrollers
