// Command calico is the Palisade CNI plugin (type "calico").
package main

import (
	"os"

	"github.com/palisade-net/palisade/cni-plugin/cmdline"
)

func main() {
	bin := cmdline.Binary{Name: "calico", Summary: "the Palisade CNI plugin: cali veth, routes and WorkloadEndpoint"}
	if handled, code := bin.HandleHuman(os.Args[1:], os.Stdout, os.Stderr); handled {
		os.Exit(code)
	}
	os.Exit(bin.NotImplemented(os.Stdout))
}
