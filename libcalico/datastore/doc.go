// Package datastore defines how Palisade stores its state: the resource
// interface every backend implements, the raw key-value interface IPAM uses,
// the key layout under /calico/, watch events, and the typed errors callers
// test with errors.Is and errors.As.
//
// It imports no etcd package, so lean binaries (the CNI plugins) can depend
// on it; the etcd v3 backend lives in the etcdv3 sub-package.
package datastore
