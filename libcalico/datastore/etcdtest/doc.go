// Package etcdtest starts real etcd servers for tests: an embedded one
// tuned for speed, or the system etcd binary as a separate process, each
// in the test's temporary directory and stopped when the test ends.
package etcdtest
