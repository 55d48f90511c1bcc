// Package etcdv3 stores Palisade's state in etcd v3 over etcd's gRPC
// client (go.etcd.io/etcd/client/v3): it implements datastore.Interface,
// Watch included, and datastore.KV, with the resource and KV rules shared
// with the lean HTTP client (etcdhttp) in etcdcore. It never imports the
// etcd server. The CNI binaries use etcdhttp instead, so they do not link
// gRPC.
package etcdv3
