// Command calicoctl is the Palisade command-line client.
package main

import (
	"fmt"
	"os"

	"github.com/palisade-net/palisade/calicoctl/commands"
)

func main() {
	if err := commands.NewRoot(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
