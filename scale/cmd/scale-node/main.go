// Command scale-node is one node's BGP part (node/bgp) for the scale
// harness (package scale/node), which runs it beside itself as a process
// of its own, configured by the environment, until SIGTERM.
//
// Its Go runtime is set as calico-node's is with no FelixConfiguration
// (goGCThreshold 40: libcalico/goruntime), since felix and the BGP
// speaker share calico-node's process.
//
// Like calico-node it listens with plain TCP, not Multipath TCP.
//
//go:debug multipathtcp=0
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/goruntime"
	"github.com/palisade-net/palisade/scale/node"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	(&goruntime.Applier{}).Apply(goruntime.FromSpec(nil, nil, nil), log.NewEntry(log.StandardLogger()))
	if err := node.Run(ctx); err != nil && ctx.Err() == nil {
		log.WithError(err).Error("Scale harness node failed")
		os.Exit(1)
	}
}
