package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Inputs are what one architecture's images are made of.
type Inputs struct {
	Arch string
	// Bin holds the Palisade binaries and pause, built for Arch.
	Bin string
	// Debs is hack/image-debs.sh's cache for Arch: node/*.deb are
	// unpacked into calico-node, cni/*.deb give it portmap and bandwidth,
	// agnhost/*.deb are the shell and tools of the agnhost image.
	Debs string
	// Agnhost is the agnhost binary for Arch; "" when there is none.
	Agnhost string
	// CoreDNS is hack/coredns.sh's coredns for Arch; "" when there is none.
	CoreDNS string
}

// Target is one image: its name, its archive and a Spec per platform.
type Target struct {
	// Ref is the name the archive gives it, as containerd stores it.
	Ref string
	// Archive is the archive's file name in the output directory.
	Archive string
	Specs   []Spec
}

// defaultPath is the images' PATH.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// iptablesLinks are what update-alternatives makes on a Debian host: the
// plain iptables commands name the nft backend (felix picks the backend
// that holds the host's rules either way).
var iptablesLinks = map[string]string{
	"usr/sbin/iptables":          "iptables-nft",
	"usr/sbin/iptables-save":     "iptables-nft-save",
	"usr/sbin/iptables-restore":  "iptables-nft-restore",
	"usr/sbin/ip6tables":         "ip6tables-nft",
	"usr/sbin/ip6tables-save":    "ip6tables-nft-save",
	"usr/sbin/ip6tables-restore": "ip6tables-nft-restore",
}

// agnhostLinks are what update-alternatives makes for the agnhost
// image's tools.
var agnhostLinks = map[string]string{"bin/nc": "nc.openbsd"}

// ChainedPlugins are the CNI plugins the manifest's conflist chains after
// calico, taken from Debian's containernetworking-plugins package and
// installed by install-cni beside calico and calico-ipam.
var ChainedPlugins = []string{"portmap", "bandwidth"}

// Targets are the five images, for every architecture of in (agnhost and
// coredns only for those with such a binary).
func Targets(in []Inputs, tag, version string, created time.Time) []Target {
	labels := func(title string) map[string]string {
		return map[string]string{"org.opencontainers.image.title": title, "org.opencontainers.image.version": version}
	}
	node := Target{Ref: NodeImage + ":" + tag, Archive: "calico-node.tar"}
	kc := Target{Ref: KubeControllersImage + ":" + tag, Archive: "calico-kube-controllers.tar"}
	pause := Target{Ref: PauseRef, Archive: "pause.tar"}
	agnhost := Target{Ref: AgnhostRef, Archive: "agnhost.tar"}
	coredns := Target{Ref: CoreDNSRef, Archive: "coredns.tar"}
	for _, p := range in {
		files := []File{
			{Src: filepath.Join(p.Bin, "calico-node"), Dst: "/bin/calico-node", Mode: 0o755},
			{Src: filepath.Join(p.Bin, "install-cni"), Dst: "/bin/install-cni", Mode: 0o755},
			{Src: filepath.Join(p.Bin, "calicoctl"), Dst: "/bin/calicoctl", Mode: 0o755},
			{Src: filepath.Join(p.Bin, "calico-etcd-proxy"), Dst: "/bin/calico-etcd-proxy", Mode: 0o755},
			{Src: filepath.Join(p.Bin, "calico"), Dst: "/opt/cni/bin/calico", Mode: 0o755},
			{Src: filepath.Join(p.Bin, "calico-ipam"), Dst: "/opt/cni/bin/calico-ipam", Mode: 0o755},
		}
		// The pattern itself when nothing matches: Check names it.
		cniDeb := filepath.Join(p.Debs, "cni", "containernetworking-plugins_*.deb")
		if m := glob(cniDeb); len(m) > 0 {
			cniDeb = m[len(m)-1]
		}
		for _, pl := range ChainedPlugins {
			files = append(files, File{Deb: cniDeb, Src: "usr/lib/cni/" + pl, Dst: "/opt/cni/bin/" + pl, Mode: 0o755})
		}
		node.Specs = append(node.Specs, Spec{
			Debs: glob(filepath.Join(p.Debs, "node", "*.deb")), Links: iptablesLinks, Files: files,
			Entrypoint: []string{"/bin/calico-node"}, Env: []string{defaultPath},
			Labels: labels("calico-node"), Arch: p.Arch, Created: created,
		})
		kc.Specs = append(kc.Specs, Spec{
			Files:      []File{{Src: filepath.Join(p.Bin, "calico-kube-controllers"), Dst: "/usr/bin/calico-kube-controllers", Mode: 0o755}},
			Entrypoint: []string{"/usr/bin/calico-kube-controllers"}, User: "999:999", Env: []string{defaultPath},
			Labels: labels("calico-kube-controllers"), Arch: p.Arch, Created: created,
		})
		// The upstream pause image runs as 65535 too.
		pause.Specs = append(pause.Specs, Spec{
			Files:      []File{{Src: filepath.Join(p.Bin, "pause"), Dst: "/pause", Mode: 0o755}},
			Entrypoint: []string{"/pause"}, User: "65535:65535",
			Labels: labels("pause"), Arch: p.Arch, Created: created,
		})
		if p.Agnhost != "" {
			// CMD pause, as upstream's: a pod naming only the image idles.
			agnhost.Specs = append(agnhost.Specs, Spec{
				Debs: glob(filepath.Join(p.Debs, "agnhost", "*.deb")), Links: agnhostLinks,
				Files:      agnhostFiles(p.Agnhost),
				Dirs:       []string{"/tmp", "/uploads"},
				Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{defaultPath},
				Labels: labels("agnhost"), Arch: p.Arch, Created: created,
			})
		}
		if p.CoreDNS != "" {
			// A static binary alone, as upstream's distroless image. Root
			// in the image: upstream's non-root user binds :53 through a
			// file capability these layers do not carry; the manifest
			// drops every capability but NET_BIND_SERVICE instead.
			coredns.Specs = append(coredns.Specs, Spec{
				Files:      []File{{Src: p.CoreDNS, Dst: "/coredns", Mode: 0o755}},
				Entrypoint: []string{"/coredns"},
				Labels:     labels("coredns"), Arch: p.Arch, Created: created,
			})
		}
	}
	return []Target{node, kc, pause, agnhost, coredns}
}

// PorterFiles are the TLS certificate and key agnhost's porter serves
// from its working directory (/), which upstream's image adds beside
// the binary; hack/kube-tools.sh puts them next to each agnhost.
var PorterFiles = []string{"localhost.crt", "localhost.key"}

// agnhostFiles are the agnhost image's own files: the binary and
// porter's certificate and key from the binary's directory.
func agnhostFiles(agnhost string) []File {
	files := []File{{Src: agnhost, Dst: "/agnhost", Mode: 0o755}}
	for _, f := range PorterFiles {
		files = append(files, File{Src: filepath.Join(filepath.Dir(agnhost), f), Dst: "/" + f, Mode: 0o644})
	}
	return files
}

// Check reports the first input a target is missing, naming it.
func Check(targets []Target) error {
	for _, t := range targets {
		for _, s := range t.Specs {
			if s.Links != nil && len(s.Debs) == 0 {
				return fmt.Errorf("%s (%s): no Debian packages: run hack/image-debs.sh %s", t.Ref, s.Arch, s.Arch)
			}
			for _, f := range s.Files {
				src := f.Src
				if f.Deb != "" {
					src = f.Deb
				}
				if _, err := os.Stat(src); err != nil {
					return fmt.Errorf("%s (%s): %s: %w (make images builds the binaries; hack/image-debs.sh %s downloads the packages)", t.Ref, s.Arch, f.Dst, err, s.Arch)
				}
			}
		}
	}
	return nil
}

func glob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	sort.Strings(m)
	return m
}
