// Package startup registers this host as a Calico node, as calico-node's
// startup phase does: it reads the configuration Calico's calico-node reads
// (NODENAME, IP, IP6, their autodetection methods, AS, the networking
// backend, the default pool settings), detects the node's addresses with
// their real prefix lengths, creates or updates the Node resource, creates
// the default IP pools and the ClusterInformation, writes the nodename file
// for the CNI plugin and turns on IP forwarding.
//
// Kernel reads and writes sit behind two small interfaces, Host (interfaces,
// addresses, route lookups) and Sysctl, so the logic runs against a network
// namespace in tests.
package startup
