// Package workload keeps a workload's datastore side in step with its
// network: the WorkloadEndpoint the calico plugin writes (built from the
// workload's identity, addresses and veth), the CNI result rebuilt from an
// endpoint, and the per-network Profile created when no policy plugin is
// configured.
package workload
