// Command calico-node is the Palisade per-node agent.
package main

import (
	"fmt"
	"os"

	"github.com/palisade-net/palisade/node/agent"
)

func main() {
	if err := agent.NewRoot(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
