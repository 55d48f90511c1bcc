// Package names derives the names users see for workloads: the host-side
// veth of a pod (cali + 11 hex digits) and the WorkloadEndpoint resource
// name (<node>-<orchestrator>-<workload>-<iface>), exactly as Calico does,
// so that the CNI plugin, felix and calicoctl agree without talking.
package names
