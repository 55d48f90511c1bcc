// Package netconf reads what a container runtime hands the calico and
// calico-ipam plugins: the network configuration on stdin (Calico's keys),
// the workload's identity from CNI_ARGS, the node name, and from those the
// connection to the datastore.
package netconf
