package bpf

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoImportOfFelix keeps the dependency between bpf/ and felix/ one
// way: felix/dataplane/bpf uses the programs, maps and readers here, and
// nothing under bpf/ (its tests included) may import, even through another
// package of the module, a package under felix/.
func TestNoImportOfFelix(t *testing.T) {
	const root = ".."
	mod := modulePath(t, root)
	felix := mod + "/felix"
	// via[p] is the package that brought p into the walk ("" for a
	// package under bpf/).
	via := map[string]string{}
	var queue []string
	add := func(p, from string) {
		if _, ok := via[p]; !ok && (p == mod || strings.HasPrefix(p, mod+"/")) {
			via[p] = from
			queue = append(queue, p)
		}
	}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		add(mod+"/bpf"+strings.TrimPrefix("/"+filepath.ToSlash(p), "/."), "")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == felix || strings.HasPrefix(p, felix+"/") {
			chain := p
			for q := via[p]; q != ""; q = via[q] {
				chain = q + " → " + chain
			}
			t.Errorf("%s: bpf/ must import nothing under felix/", chain)
			continue
		}
		pkg, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(p, mod)), 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			continue
		}
		if err != nil {
			t.Fatalf("package %s: %v", p, err)
		}
		imports := pkg.Imports
		if via[p] == "" {
			// bpf/'s own tests count too.
			imports = append(append(imports, pkg.TestImports...), pkg.XTestImports...)
		}
		for _, imp := range imports {
			add(imp, p)
		}
	}
	// The walk saw the packages it is meant to check.
	for _, p := range []string{mod + "/bpf/inspect", mod + "/libcalico/golden"} {
		if _, ok := via[p]; !ok {
			t.Errorf("the walk never reached %s", p)
		}
	}
}

// modulePath reads the module's path from go.mod in root.
func modulePath(t *testing.T, root string) string {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(l, "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}
