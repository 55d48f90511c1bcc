// Package calc is felix's calculation graph: it turns the stream of
// datastore updates (endpoints, policy, profiles, tiers, network sets, IP
// pools and FelixConfiguration) into what one node must enforce — for each
// local endpoint the ordered tiers, policies and profiles per direction, the
// rules in a small intermediate form, the IP sets those rules need with
// their members kept from every endpoint and network set in the cluster, the
// NAT pools, the merged configuration and the local workload routes. It
// never touches the kernel; a Dataplane receives its output in dependency
// order. See felix/DESIGN.md for the stages.
package calc
