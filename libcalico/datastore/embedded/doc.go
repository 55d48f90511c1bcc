// Package embedded runs an etcd server inside the process, for calico-node
// when no external etcd is configured (and for tests). Only binaries that
// serve etcd may import it: it pulls in the whole etcd server.
package embedded
