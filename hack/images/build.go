package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one file of a layer: Src on this machine, Dst in the image.
type File struct {
	Src, Dst string
	Mode     int64
}

// Spec is one image.
type Spec struct {
	// Name is the repository (palisade/calico-node), Tag its tag.
	Name, Tag string
	// Debs are Debian packages unpacked into the first layer.
	Debs []string
	// Links are symlinks added to the Debian layer (Dst → Src), as the
	// packages' maintainer scripts would make them (update-alternatives).
	Links map[string]string
	// Files make the last layer.
	Files      []File
	Entrypoint []string
	User       string
	Env        []string
	Labels     map[string]string
	Arch       string
	// Created is the image's creation time (and every file's mtime), so
	// the same inputs make the same image.
	Created time.Time
}

// skipDebPaths are parts of the packages an image does not need.
var skipDebPaths = []string{"usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/", "usr/share/bug/"}

// debLayer unpacks the packages into one tar layer: every package's
// files (dpkg-deb --fsys-tarfile), each directory once, documentation
// left out, plus the links and /tmp.
func debLayer(debs []string, links map[string]string, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for _, deb := range debs {
		out, err := exec.Command("dpkg-deb", "--fsys-tarfile", deb).Output()
		if err != nil {
			return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", deb, err)
		}
		tr := tar.NewReader(bytes.NewReader(out))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", deb, err)
			}
			name := strings.TrimPrefix(path.Clean(h.Name), "./")
			if name == "." || name == "" || skipped(name) {
				continue
			}
			if h.Typeflag == tar.TypeDir {
				name += "/"
			}
			if seen[name] {
				if h.Typeflag == tar.TypeDir {
					continue
				}
				return nil, fmt.Errorf("%s: %s is in two packages", deb, name)
			}
			seen[name] = true
			h.Name = name
			if h.Typeflag == tar.TypeLink {
				h.Linkname = strings.TrimPrefix(path.Clean(h.Linkname), "./")
			}
			h.ModTime, h.AccessTime, h.ChangeTime = mtime, time.Time{}, time.Time{}
			h.Uname, h.Gname = "", ""
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return nil, err
			}
		}
	}
	extra := []*tar.Header{{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: mtime}}
	names := make([]string, 0, len(links))
	for n := range links {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if seen[n] {
			return nil, fmt.Errorf("link %s: the packages already have it", n)
		}
		extra = append(extra, &tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: links[n], Mode: 0o777, ModTime: mtime})
	}
	for _, h := range extra {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func skipped(name string) bool {
	for _, p := range skipDebPaths {
		if strings.HasPrefix(name+"/", p) {
			return true
		}
	}
	return false
}

// fileLayer is a tar layer of files, with their parent directories.
func fileLayer(files []File, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f.Src)
		if err != nil {
			return nil, err
		}
		dst := strings.TrimPrefix(path.Clean(f.Dst), "/")
		var parents []string
		for d := path.Dir(dst); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
			dirs[d] = true
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: dst, Typeflag: tar.TypeReg, Mode: f.Mode, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layer is a tar layer, compressed once (the library would compress it
// again for every digest and every write).
func layer(data []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// Image builds the image of a spec: the Debian layer (when it has
// packages), then its files, with an OCI manifest and config.
func Image(s Spec) (v1.Image, error) {
	var tars [][]byte
	if len(s.Debs) > 0 {
		data, err := debLayer(s.Debs, s.Links, s.Created)
		if err != nil {
			return nil, err
		}
		tars = append(tars, data)
	}
	data, err := fileLayer(s.Files, s.Created)
	if err != nil {
		return nil, err
	}
	var layers []v1.Layer
	for _, data := range append(tars, data) {
		l, err := layer(data)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layers...); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = s.Arch, "linux"
	cf.Created = v1.Time{Time: s.Created}
	cf.Config.Entrypoint, cf.Config.User, cf.Config.Env, cf.Config.Labels = s.Entrypoint, s.User, s.Env, s.Labels
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img as an OCI image layout in a tar archive (what
// `ctr images import`, `podman load` and `docker load` read), named
// name:tag in the index.
func WriteArchive(out string, img v1.Image, name, tag string) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          "docker.io/" + name + ":" + tag,
	})); err != nil {
		return err
	}
	return tarDir(dir, out)
}

// tarDir writes dir's files into a tar at out, in name order.
func tarDir(dir, out string) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), time.Unix(0, 0), 0, 0, "", ""
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return os.Rename(tmp, out)
}
