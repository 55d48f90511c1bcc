// Command calicoctl is the Palisade command-line client.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/palisade-net/palisade/calicoctl/commands"
)

func main() {
	if err := commands.NewRoot(os.Stdout, os.Stderr).Execute(); err != nil {
		var exit *commands.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.Code)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
