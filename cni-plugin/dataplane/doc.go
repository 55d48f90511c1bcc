// Package dataplane does the kernel work of the calico plugin: the veth
// between a node and a workload, the workload's addresses and routes
// (everything via 169.254.1.1, answered by proxy ARP on the host side), the
// host route to each address, and the checks and teardown of all of it.
// It runs in the caller's network namespace for the host side and enters
// the workload's namespace for the container side.
package dataplane
