// Command images builds the calico-node and calico-kube-controllers
// container images as OCI image archives, without a container engine:
// the binaries of bin/ and, for calico-node, the Debian userspace felix
// runs (iptables with both backends, ipset and their libraries) unpacked
// from the packages hack/image-debs.sh downloaded. `make images` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"
)

// Names of the images, as manifests/calico-etcd.yaml refers to them.
const (
	NodeImage            = "palisade/calico-node"
	KubeControllersImage = "palisade/calico-kube-controllers"
)

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

// Specs are the two images, from the binaries in bin and the packages
// in debs.
func Specs(bin string, debs []string, tag, version string, created time.Time) []Spec {
	labels := func(title string) map[string]string {
		return map[string]string{"org.opencontainers.image.title": title, "org.opencontainers.image.version": version}
	}
	return []Spec{
		{
			Name: NodeImage, Tag: tag, Debs: debs, Links: iptablesLinks,
			Files: []File{
				{filepath.Join(bin, "calico-node"), "/bin/calico-node", 0o755},
				{filepath.Join(bin, "install-cni"), "/bin/install-cni", 0o755},
				{filepath.Join(bin, "calicoctl"), "/bin/calicoctl", 0o755},
				{filepath.Join(bin, "calico"), "/opt/cni/bin/calico", 0o755},
				{filepath.Join(bin, "calico-ipam"), "/opt/cni/bin/calico-ipam", 0o755},
			},
			Entrypoint: []string{"/bin/calico-node"}, Env: []string{defaultPath},
			Labels: labels("calico-node"), Arch: runtime.GOARCH, Created: created,
		},
		{
			Name: KubeControllersImage, Tag: tag,
			Files:      []File{{filepath.Join(bin, "calico-kube-controllers"), "/usr/bin/calico-kube-controllers", 0o755}},
			Entrypoint: []string{"/usr/bin/calico-kube-controllers"}, User: "999:999", Env: []string{defaultPath},
			Labels: labels("calico-kube-controllers"), Arch: runtime.GOARCH, Created: created,
		},
	}
}

// ArchiveName is the file an image is written to.
func ArchiveName(image string) string { return filepath.Base(image) + ".oci.tar" }

func main() {
	bin := flag.String("bin", "bin", "directory of the Palisade binaries")
	debDir := flag.String("debs", "", "directory of the Debian packages for calico-node (hack/image-debs.sh --print-dir)")
	out := flag.String("out", "images", "where the archives are written")
	tag := flag.String("tag", "latest", "the images' tag")
	version := flag.String("version", "dev", "the version recorded in the images' labels")
	createdFlag := flag.String("created", "1970-01-01T00:00:00Z", "creation time of the images and their files (RFC 3339)")
	flag.Parse()
	if err := run(*bin, *debDir, *out, *tag, *version, *createdFlag); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(bin, debDir, out, tag, version, createdFlag string) error {
	created, err := time.Parse(time.RFC3339, createdFlag)
	if err != nil {
		return fmt.Errorf("-created %q: %w", createdFlag, err)
	}
	if debDir == "" {
		return fmt.Errorf("-debs is required (hack/image-debs.sh --print-dir)")
	}
	debs, err := filepath.Glob(filepath.Join(debDir, "*.deb"))
	if err != nil || len(debs) == 0 {
		return fmt.Errorf("no Debian packages in %s: run hack/image-debs.sh", debDir)
	}
	sort.Strings(debs)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, s := range Specs(bin, debs, tag, version, created) {
		img, err := Image(s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		path := filepath.Join(out, ArchiveName(s.Name))
		if err := WriteArchive(path, img, s.Name, s.Tag); err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		digest, _ := img.Digest()
		fmt.Printf("%s:%s %s %s\n", s.Name, s.Tag, digest, path)
	}
	return nil
}
