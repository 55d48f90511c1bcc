// Package etcdhttp is the lean etcd client of the CNI binaries: the same
// datastore.Interface and datastore.KV as etcdv3 (the rules live in
// etcdcore), spoken as JSON to etcd's gRPC gateway (POST /v3/kv/range,
// /v3/kv/txn, /v3/auth/authenticate) over plain net/http, with TLS and
// username/password. It links no gRPC or protobuf, so a process that execs
// once per pod starts fast. It cannot watch: long-running processes use
// etcdv3.
//
// The gateway is on by default on every etcd client URL (etcd's
// --enable-grpc-gateway, embed.Config.EnableGRPCGateway). One etcd set-up
// it cannot serve: client-certificate authentication with etcd auth
// enabled, where etcd takes the user from the certificate's common name;
// the gateway refuses such certificates, so use a certificate without a
// common name and a username/password, or etcdv3.
package etcdhttp
