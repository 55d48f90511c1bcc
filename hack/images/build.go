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

// File is one file of a layer: Src on this machine (or, with Deb, the
// path of a file in that Debian package), Dst in the image.
type File struct {
	Deb      string
	Src, Dst string
	Mode     int64
}

// Spec is one image for one platform.
type Spec struct {
	// Debs are Debian packages unpacked into the first layer.
	Debs []string
	// Links are symlinks added to the Debian layer (Dst → Src), as the
	// packages' maintainer scripts would make them (update-alternatives).
	Links map[string]string
	// Files make the last layer, with Dirs (empty directories, 1777).
	Files      []File
	Dirs       []string
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
	Labels     map[string]string
	Arch       string
	// Created is the image's creation time (and every file's mtime), so
	// the same inputs make the same image.
	Created time.Time
}

// walkDeb calls fn for every entry of the file system a Debian package
// unpacks (dpkg-deb --fsys-tarfile), in the package's order.
func walkDeb(deb string, fn func(h *tar.Header, r io.Reader) error) error {
	out, err := exec.Command("dpkg-deb", "--fsys-tarfile", deb).Output()
	if err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", deb, err)
	}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", deb, err)
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
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
		err := walkDeb(deb, func(h *tar.Header, r io.Reader) error {
			name := strings.TrimPrefix(path.Clean(h.Name), "./")
			if name == "." || name == "" || skipped(name) {
				return nil
			}
			if h.Typeflag == tar.TypeDir {
				name += "/"
			}
			if seen[name] {
				if h.Typeflag == tar.TypeDir {
					return nil
				}
				return fmt.Errorf("%s: %s is in two packages", deb, name)
			}
			seen[name] = true
			h.Name = name
			if h.Typeflag == tar.TypeLink {
				h.Linkname = strings.TrimPrefix(path.Clean(h.Linkname), "./")
			}
			h.ModTime, h.AccessTime, h.ChangeTime = mtime, time.Time{}, time.Time{}
			h.Uname, h.Gname = "", ""
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			_, err := io.Copy(tw, r)
			return err
		})
		if err != nil {
			return nil, err
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

// fileLayer is a tar layer of files, with their parent directories, and
// of the empty directories dirs.
func fileLayer(files []File, dirs []string, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(path.Clean(d), "/") + "/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	made := map[string]bool{}
	debs := map[string]map[string][]byte{}
	for _, f := range files {
		var data []byte
		var err error
		if f.Deb != "" {
			data, err = fromDeb(debs, f.Deb, f.Src)
		} else {
			data, err = os.ReadFile(f.Src)
		}
		if err != nil {
			return nil, err
		}
		dst := strings.TrimPrefix(path.Clean(f.Dst), "/")
		var parents []string
		for d := path.Dir(dst); d != "." && !made[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
			made[d] = true
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

// fromDeb returns the file name of the Debian package deb (read once
// into cache, regular files only).
func fromDeb(cache map[string]map[string][]byte, deb, name string) ([]byte, error) {
	files, ok := cache[deb]
	if !ok {
		files = map[string][]byte{}
		err := walkDeb(deb, func(h *tar.Header, r io.Reader) error {
			if h.Typeflag != tar.TypeReg {
				return nil
			}
			b, err := io.ReadAll(r)
			files[strings.TrimPrefix(path.Clean(h.Name), "./")] = b
			return err
		})
		if err != nil {
			return nil, err
		}
		cache[deb] = files
	}
	data, ok := files[name]
	if !ok {
		return nil, fmt.Errorf("%s has no file %s", deb, name)
	}
	return data, nil
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
	data, err := fileLayer(s.Files, s.Dirs, s.Created)
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
	cf.Architecture, cf.OS, cf.Variant = s.Arch, "linux", variant(s.Arch)
	cf.Created = v1.Time{Time: s.Created}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User, cf.Config.Env, cf.Config.Labels = s.Entrypoint, s.Cmd, s.User, s.Env, s.Labels
	return mutate.ConfigFile(img, cf)
}

// variant is the platform variant of arch, as containerd normalizes it
// (arm64 is v8).
func variant(arch string) string {
	if arch == "arm64" {
		return "v8"
	}
	return ""
}

// Index builds every platform's image of t into one OCI image index,
// each manifest named by its platform, so a runtime picks its own.
func Index(t Target) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, s := range t.Specs {
		img, err := Image(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: "linux", Architecture: s.Arch, Variant: variant(s.Arch)},
		}})
	}
	return idx, nil
}

// WriteArchive writes idx as an OCI image layout in a tar archive (what
// `ctr images import`, `podman load` and `docker load` read), named ref
// (a full name:tag) in the layout's index.
func WriteArchive(out string, idx v1.ImageIndex, ref string) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
		"io.containerd.image.name":          ref,
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
