// Package golden compares generated text with a golden file (usually
// under testdata/), rewriting the file first when asked to (each test
// package's -update flag).
package golden

import (
	"os"
	"path/filepath"
	"testing"
)

// Check fails t when got differs from the file at path; with update it
// writes got there first.
func Check(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs; diff with -update:\n%s", path, got)
	}
}
