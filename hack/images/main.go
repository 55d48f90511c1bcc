// Command images builds Palisade's container images, and the two images a
// real-node lab needs besides, as multi-platform OCI image archives
// without a container engine: calico-node (the binaries of bin/, the
// portmap and bandwidth CNI plugins and the Debian userspace felix runs,
// unpacked from the packages hack/image-debs.sh downloaded),
// calico-kube-controllers, the kubelet's sandbox image (pause), the e2e
// suites' workload (agnhost) and the cluster DNS of manifests/coredns.yaml
// (coredns). `make images` runs it.
package main

import (
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Names of the images, as manifests/calico-etcd.yaml (Palisade's) and
// the kubelet and the e2e suite (pause, agnhost) and manifests/coredns.yaml
// refer to them.
const (
	NodeImage            = "docker.io/palisade/calico-node"
	KubeControllersImage = "docker.io/palisade/calico-kube-controllers"
	// PauseRef is the sandbox image kubelet v1.37 and kubeadm default to.
	PauseRef = "registry.k8s.io/pause:3.10.2"
	// AgnhostRef is the image test/e2e v1.37.2 runs its workloads in
	// (test/utils/image/manifest.go).
	AgnhostRef = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	// CoreDNSRef is the cluster DNS add-on, tagged with the CoreDNS
	// version hack/coredns.sh builds (kubeadm v1.37 would pull v1.14.6).
	CoreDNSRef = "registry.k8s.io/coredns/coredns:v1.15.0"
)

// Arches are the architectures `make images` builds for.
var Arches = []string{"amd64", "arm64"}

func main() {
	bin := flag.String("bin", "bin/linux-{arch}", "directory of the Palisade binaries (and pause) built for {arch}")
	debs := flag.String("debs", "", "directory of the Debian packages for {arch} (hack/image-debs.sh --print-dir '{arch}')")
	agnhost := flag.String("agnhost", "", "agnhost binaries (comma-separated; each one's ELF header says its architecture)")
	coredns := flag.String("coredns", "", "coredns binaries (comma-separated; each one's ELF header says its architecture)")
	arches := flag.String("arch", strings.Join(Arches, ","), "architectures to build")
	out := flag.String("out", "images", "where the archives are written")
	tag := flag.String("tag", "latest", "the Palisade images' tag")
	version := flag.String("version", "dev", "the version recorded in the images' labels")
	createdFlag := flag.String("created", "1970-01-01T00:00:00Z", "creation time of the images and their files (RFC 3339)")
	flag.Parse()
	if err := run(*bin, *debs, *agnhost, *coredns, *arches, *out, *tag, *version, *createdFlag); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(bin, debs, agnhost, coredns, arches, out, tag, version, createdFlag string) error {
	created, err := time.Parse(time.RFC3339, createdFlag)
	if err != nil {
		return fmt.Errorf("-created %q: %w", createdFlag, err)
	}
	if debs == "" {
		return fmt.Errorf("-debs is required (hack/image-debs.sh --print-dir '{arch}')")
	}
	agn, err := byArch(agnhost)
	if err != nil {
		return fmt.Errorf("-agnhost: %w", err)
	}
	dns, err := byArch(coredns)
	if err != nil {
		return fmt.Errorf("-coredns: %w", err)
	}
	var in []Inputs
	for _, arch := range strings.Split(arches, ",") {
		in = append(in, Inputs{Arch: arch, Bin: strings.ReplaceAll(bin, "{arch}", arch),
			Debs: strings.ReplaceAll(debs, "{arch}", arch), Agnhost: agn[arch], CoreDNS: dns[arch]})
	}
	targets := Targets(in, tag, version, created)
	if err := Check(targets); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, t := range targets {
		if len(t.Specs) == 0 {
			fmt.Printf("%s: not built (no input for any architecture)\n", t.Ref)
			continue
		}
		idx, err := Index(t)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Ref, err)
		}
		path := filepath.Join(out, t.Archive)
		if err := WriteArchive(path, idx, t.Ref); err != nil {
			return fmt.Errorf("%s: %w", t.Ref, err)
		}
		digest, _ := idx.Digest()
		var archs []string
		for _, s := range t.Specs {
			archs = append(archs, s.Arch)
		}
		fmt.Printf("%s %s %s [%s]\n", t.Ref, digest, path, strings.Join(archs, " "))
	}
	return nil
}

// byArch maps a comma-separated list of executables to their
// architectures, read from their ELF headers.
func byArch(list string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range strings.Split(list, ",") {
		if p == "" {
			continue
		}
		arch, err := ELFArch(p)
		if err != nil {
			return nil, err
		}
		m[arch] = p
	}
	return m, nil
}

// ELFArch is the GOARCH name of an ELF executable's machine.
func ELFArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", fmt.Errorf("%s: ELF machine %v is neither amd64 nor arm64", path, f.Machine)
}
