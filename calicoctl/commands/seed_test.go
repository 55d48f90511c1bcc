package commands_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestSeedExamples applies each of Calico's example documents kept by the
// API package: a valid one must apply, read back with -o yaml, and apply
// again unchanged; an invalid one must be refused with nothing written.
func TestSeedExamples(t *testing.T) {
	files, err := filepath.Glob("../../libcalico/api/v3/testdata/seed/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed examples found: %v", err)
	}
	c := newCluster(t)
	applied := 0
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rs, decodeErr := v3.Decode(data)
			valid := decodeErr == nil && len(rs) > 0
			for _, r := range rs {
				if info, ok := v3.KindByName(r.GetTypeMeta().Kind); !ok || !info.Stored {
					valid = false
					continue
				}
				v3.Default(r)
				if v3.Validate(r) != nil {
					valid = false
				}
			}
			before := c.dump(t)
			res := c.run(t, "", nil, "apply", "-f", f)
			if !valid {
				if res.code == 0 {
					t.Fatalf("invalid example was applied: %s", res.stdout)
				}
				if after := c.dump(t); len(after) != len(before) {
					t.Errorf("refused example changed the datastore (%d -> %d keys)", len(before), len(after))
				}
				return
			}
			if res.code != 0 {
				t.Fatalf("apply: exit %d: %s%s", res.code, res.stdout, res.stderr)
			}
			applied++
			for _, r := range rs {
				m := r.GetObjectMeta()
				args := []string{"get", r.GetTypeMeta().Kind, m.Name, "-o", "yaml"}
				if m.Namespace != "" {
					args = append(args, "-n", m.Namespace)
				}
				first := c.mustRun(t, "", args...)
				again := c.run(t, first, nil, "apply", "-f", "-")
				if again.code != 0 || !strings.HasPrefix(again.stdout, "Successfully applied 1 ") {
					t.Fatalf("re-applying the read-back YAML: exit %d: %s%s\n%s", again.code, again.stdout, again.stderr, first)
				}
				second := c.mustRun(t, "", args...)
				if mask(first) != mask(second) {
					t.Errorf("re-applying changed the resource:\n%s\nthen\n%s", first, second)
				}
			}
		})
	}
	if applied == 0 {
		t.Errorf("no seed example was valid")
	}
}
