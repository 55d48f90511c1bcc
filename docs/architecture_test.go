package docs

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The rule the architecture map follows, which this test enforces:
//
//   - every top-level folder holding a file tracked by git (hidden ones
//     such as .ci/ included) is named in docs/architecture.md as `name/`;
//   - every folder holding a .go file is named as `path/from/the/root/`:
//     libraries, test-only packages and the cmd/ mains alike. Folders named
//     testdata, and folders under one, are not packages (the go tool
//     ignores them) and are not required;
//   - every such `path/` the page names whose first element is a
//     top-level folder exists, so a moved or deleted package shows up.
//
// The page is read from this folder and the tree from its parent; the test
// needs git (for the tracked files) and nothing else: no root, no network.

// root is the repository's top, this package's parent folder.
const root = ".."

func readArchitecture(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatalf("reading docs/architecture.md: %v", err)
	}
	return string(data)
}

// topLevelFolders are the first path elements of git's tracked files that
// are folders.
func topLevelFolders(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	var dirs []string
	for _, f := range strings.Split(string(out), "\x00") {
		if first, _, ok := strings.Cut(f, "/"); ok && !slices.Contains(dirs, first) {
			dirs = append(dirs, first)
		}
	}
	slices.Sort(dirs)
	return dirs
}

// goPackageFolders are the folders under root holding a .go file, as
// slash-separated paths from root, testdata folders left out.
func goPackageFolders(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			if rel != "." {
				seen[filepath.ToSlash(rel)] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func TestArchitectureNamesEveryTopLevelFolder(t *testing.T) {
	doc := readArchitecture(t)
	dirs := topLevelFolders(t)
	if len(dirs) == 0 {
		t.Fatal("git ls-files listed no folder")
	}
	for _, d := range dirs {
		if !strings.Contains(doc, "`"+d+"/`") {
			t.Errorf("docs/architecture.md does not name the top-level folder `%s/`", d)
		}
	}
}

func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc := readArchitecture(t)
	pkgs := goPackageFolders(t)
	if !slices.Contains(pkgs, "docs") {
		t.Fatalf("the walk of %s found no docs package (found %d folders): wrong root?", root, len(pkgs))
	}
	for _, p := range pkgs {
		if !strings.Contains(doc, "`"+p+"/`") {
			t.Errorf("docs/architecture.md does not name the package `%s/`", p)
		}
	}
}

// pathName is a `path/` name on the page: a backticked, slash-ended path.
var pathName = regexp.MustCompile("`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*)/`")

func TestArchitectureNamesOnlyFoldersThatExist(t *testing.T) {
	doc := readArchitecture(t)
	top := topLevelFolders(t)
	checked := map[string]bool{}
	for _, m := range pathName.FindAllStringSubmatch(doc, -1) {
		if checked[m[1]] {
			continue
		}
		checked[m[1]] = true
		first, _, _ := strings.Cut(m[1], "/")
		if !slices.Contains(top, first) {
			continue // a path on the node (`/var/run/calico/`) or a tool's, not the tree's
		}
		if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1]))); err != nil || !fi.IsDir() {
			t.Errorf("docs/architecture.md names `%s/`, which is no folder of the tree", m[1])
		}
	}
}
