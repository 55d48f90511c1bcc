// Command calico-ipam is the Palisade IPAM plugin (type "calico-ipam").
package main

import (
	"os"

	"github.com/palisade-net/palisade/cni-plugin/cmdline"
)

func main() {
	bin := cmdline.Binary{Name: "calico-ipam", Summary: "the Palisade IPAM plugin: addresses from etcd-backed IP pools"}
	if handled, code := bin.HandleHuman(os.Args[1:], os.Stdout, os.Stderr); handled {
		os.Exit(code)
	}
	os.Exit(bin.NotImplemented(os.Stdout))
}
