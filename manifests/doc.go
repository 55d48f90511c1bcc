// Package manifests holds the Kubernetes manifests that install Palisade
// on a cluster (calico-etcd.yaml, Calico's etcd-datastore layout), and the
// cluster DNS add-on the lab and the e2e suites use (coredns.yaml). Its
// tests apply them to a real kube-apiserver, check their RBAC against what
// the code does, and run install-cni and calico-kube-controllers with the
// environment and the ServiceAccounts the manifests give them.
package manifests
