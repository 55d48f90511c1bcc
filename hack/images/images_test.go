package main

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// inputs are the binaries ($PALISADE_BIN) and the packages
// (hack/image-debs.sh's cache): make test provides both.
func inputs(t *testing.T) (string, []string) {
	t.Helper()
	bin := os.Getenv("PALISADE_BIN")
	if bin == "" {
		t.Skip("PALISADE_BIN is not set (make test sets it)")
	}
	out, err := exec.Command("../image-debs.sh", "--print-dir").Output()
	if err != nil {
		t.Fatal(err)
	}
	debs, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "*.deb"))
	if len(debs) == 0 {
		t.Fatalf("no packages in %s: run hack/image-debs.sh (make test does)", out)
	}
	return bin, debs
}

// unpack extracts an archive into dir.
func unpack(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	extract(t, tar.NewReader(f), dir)
}

func extract(t *testing.T, tr *tar.Reader, dir string) map[string]*tar.Header {
	t.Helper()
	files := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, os.FileMode(h.Mode)&os.ModePerm)
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeLink:
			err = os.Link(filepath.Join(dir, h.Linkname), p)
		}
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
	}
}

// TestImages builds both images from bin/ and the Debian packages, writes
// their archives, and reads them back as a runtime would: the OCI index
// names the image, every blob matches its digest, the config has the
// entrypoint, user and architecture, the layers hold the binaries and
// felix's userspace; as root, that userspace runs in a chroot of the
// image's file system.
func TestImages(t *testing.T) {
	bin, debs := inputs(t)
	began := time.Now()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, s := range Specs(bin, debs, "test", "v-test", created) {
		t.Run(filepath.Base(s.Name), func(t *testing.T) {
			img, err := Image(s)
			if err != nil {
				t.Fatal(err)
			}
			archive := filepath.Join(t.TempDir(), ArchiveName(s.Name))
			if err := WriteArchive(archive, img, s.Name, s.Tag); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			unpack(t, archive, dir)
			p, err := layout.FromPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := p.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(im.Manifests) != 1 || im.Manifests[0].MediaType != types.OCIManifestSchema1 ||
				im.Manifests[0].Annotations["io.containerd.image.name"] != "docker.io/"+s.Name+":test" ||
				im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "test" {
				t.Fatalf("index: %+v", im.Manifests)
			}
			back, err := idx.Image(im.Manifests[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate.Image(back); err != nil {
				t.Fatalf("the archive's blobs do not match their digests: %v", err)
			}
			cf, err := back.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Architecture != runtime.GOARCH || cf.OS != "linux" || !slices.Equal(cf.Config.Entrypoint, s.Entrypoint) ||
				cf.Config.User != s.User || cf.Config.Labels["org.opencontainers.image.version"] != "v-test" || !cf.Created.Time.Equal(created) {
				t.Errorf("config: %s/%s entrypoint %v user %q labels %v created %v", cf.OS, cf.Architecture, cf.Config.Entrypoint, cf.Config.User, cf.Config.Labels, cf.Created)
			}
			layers, err := back.Layers()
			if err != nil {
				t.Fatal(err)
			}
			wantLayers := 1
			if len(s.Debs) > 0 {
				wantLayers = 2
			}
			if len(layers) != wantLayers {
				t.Errorf("%d layers, want %d", len(layers), wantLayers)
			}
			for _, l := range layers {
				if mt, _ := l.MediaType(); mt != types.OCILayer {
					t.Errorf("layer media type %s", mt)
				}
			}
			rootfs := t.TempDir()
			rc := mutate.Extract(back)
			files := extract(t, tar.NewReader(rc), rootfs)
			rc.Close()
			for _, f := range s.Files {
				h := files[strings.TrimPrefix(f.Dst, "/")]
				if h == nil || h.Mode != 0o755 {
					t.Errorf("%s: %+v", f.Dst, h)
				}
			}
			if len(s.Debs) == 0 {
				return
			}
			for _, want := range []string{"usr/sbin/ipset", "usr/sbin/xtables-nft-multi", "usr/sbin/xtables-legacy-multi",
				"usr/sbin/iptables-nft-restore", "usr/sbin/iptables-legacy-save", "usr/sbin/iptables", "lib64/ld-linux-x86-64.so.2", "etc/protocols"} {
				if files[want] == nil {
					t.Errorf("the image has no %s", want)
				}
			}
			for p := range files {
				if strings.HasPrefix(p, "usr/share/doc/") || strings.HasPrefix(p, "usr/share/man/") {
					t.Errorf("documentation in the image: %s", p)
					break
				}
			}
			if os.Geteuid() != 0 {
				t.Log("not root: the image's userspace is not run in a chroot")
				return
			}
			for _, argv := range [][]string{
				{"/usr/sbin/iptables", "--version"}, {"/usr/sbin/iptables-legacy-save", "--version"},
				{"/usr/sbin/ip6tables-nft-restore", "--version"}, {"/usr/sbin/ipset", "version"},
				{"/bin/calico-node", "version"}, {"/bin/install-cni", "version"},
			} {
				out, err := exec.Command("chroot", append([]string{rootfs}, argv...)...).CombinedOutput()
				if err != nil {
					t.Errorf("chroot %s: %v\n%s", strings.Join(argv, " "), err, out)
				}
				if argv[0] == "/usr/sbin/iptables" && !strings.Contains(string(out), "nf_tables") {
					t.Errorf("iptables in the image is not the nft backend: %s", out)
				}
			}
		})
	}
	t.Logf("built and read back both images in %s", time.Since(began).Round(time.Millisecond))
}
