// Command calico-node is the Palisade per-node agent.
//
// Its listeners are plain TCP: since Go 1.24 net.Listen opens Multipath
// TCP sockets, on which TCP MD5 (BGP passwords) and the minimum TTL of
// GTSM cannot be set, so GoBGP could not accept a session that needs
// either.
//
//go:debug multipathtcp=0
package main

import (
	"fmt"
	"os"

	"github.com/palisade-net/palisade/node/agent"
)

func main() {
	// Calico's exec probe flags (-felix-ready, -bird-ready, …).
	if handled, code := agent.Probe(os.Args[1:], os.Getenv, os.Stdout); handled {
		os.Exit(code)
	}
	if err := agent.NewRoot(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
