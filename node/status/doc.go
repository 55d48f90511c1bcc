// Package status is how a running calico-node tells the world about itself:
// the types of its status report (process liveness and the BGP peer table),
// the small HTTP API that serves that report on a unix socket, the client
// `calicoctl node status` uses to read it, and the pid file that marks a
// running agent.
package status
