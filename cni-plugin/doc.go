// Package cniplugin holds the end-to-end tests and benchmarks of the calico
// and calico-ipam CNI binaries: they run the built binaries through libcni,
// as a container runtime does, inside network namespaces the tests create,
// against a real etcd. The plugins themselves live in cmd/, their logic in
// the small packages beside it.
package cniplugin
