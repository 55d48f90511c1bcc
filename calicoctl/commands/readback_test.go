package commands_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// TestReadbackCatalogue applies every document of testdata/readback/*.yaml
// on its own, in file order, and reads it back with `calicoctl get -o
// yaml`: the outputs, with uid, resourceVersion and creationTimestamp
// masked, are the golden readback-<file>.txt. They are what Calico stores
// and prints for the same input: what the user wrote (CIDRs with host
// bits, bare addresses) and the defaults Calico's client and CRD schemas
// fill in.
func TestReadbackCatalogue(t *testing.T) {
	c := newCluster(t)
	files, err := filepath.Glob(filepath.Join("..", "testdata", "readback", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no readback inputs: %v", err)
	}
	cases := 0
	kinds := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimSuffix(filepath.Base(f), ".yaml")
		var out strings.Builder
		for i, doc := range strings.Split(string(data), "\n---\n") {
			rs, err := v3.Decode([]byte(doc))
			if err != nil || len(rs) != 1 {
				t.Fatalf("%s document %d: %v (%d resources)", f, i+1, err, len(rs))
			}
			r := rs[0]
			kind, m := r.GetTypeMeta().Kind, r.GetObjectMeta()
			kinds[kind] = true
			c.mustRun(t, doc, "apply", "-f", "-")
			args := []string{"get", kind, m.Name, "-o", "yaml"}
			label := kind + " " + m.Name
			if m.Namespace != "" {
				args = append(args, "-n", m.Namespace)
				label = kind + " " + m.Namespace + "/" + m.Name
			}
			out.WriteString("# " + label + "\n" + c.mustRun(t, "", args...))
			cases++
		}
		golden(t, "readback-"+base+".txt", out.String())
	}
	if cases < 150 {
		t.Errorf("the catalogue has %d cases, want at least 150", cases)
	}
	for _, info := range v3.Kinds() {
		if info.Stored && info.Kind != v3.KindClusterInformation && !kinds[info.Kind] {
			t.Errorf("the catalogue has no %s", info.Kind)
		}
	}
}
