// Package scale is the scale harness: it measures what Palisade costs as a
// cluster grows, with the real components where the cost lives — felix's
// calculation graph (felix/calc), the datastore syncer felix runs against a
// real etcd (one connection per simulated agent, many agents per process),
// a route reflector running node/bgp against simulated BGP speakers on
// loopback addresses, with BIRD 2 reflecting for the same speakers in the
// same run, and the IPAM allocator under a start-up storm. Only what a
// node's kernel would do is left out. Each measurement returns one Point per
// cluster size; fit.go fits the growth and report.go writes the table and
// the plots of docs/scale.md.
package scale
