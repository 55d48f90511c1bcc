// Package bench holds felix's dataplane benchmarks (in its tests): the
// cost of programming a large ruleset against a raw iptables-restore, and,
// through the whole pipeline (etcd → syncer → graph → dataplane) in network
// namespaces, policy-to-enforcement latency, a new pod's time to its first
// allowed packet, and the request/response rate under many policies.
package bench
