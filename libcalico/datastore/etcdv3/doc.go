// Package etcdv3 stores Palisade's state in etcd v3: it implements
// datastore.Interface for projectcalico.org/v3 resources and datastore.KV
// for raw IPAM keys, over go.etcd.io/etcd/client/v3 only (never the etcd
// server, so the CNI binaries stay lean).
package etcdv3
