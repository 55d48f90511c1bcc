// Package etcdcore holds what Palisade's etcd clients share: the rules of
// datastore.Interface (without Watch) and datastore.KV written once over
// a small Transport (a range read and a transaction), and the connection
// Config. It imports no etcd or gRPC package, so a client built on a plain
// HTTP transport (etcdhttp, for the CNI binaries) stays lean, while the
// gRPC one (etcdv3) adds Watch on top of the same code.
package etcdcore
