package v3

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCalicoExportsApply checks that resources as a current Calico exports
// them (every field of Calico's API, Kubernetes object metadata included)
// decode strictly, default and validate.
func TestCalicoExportsApply(t *testing.T) {
	files, err := filepath.Glob("testdata/calico-export/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no export files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := Decode(data)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			for _, r := range rs {
				Default(r)
				if err := Validate(r); err != nil {
					t.Errorf("%s %q: %v", r.GetTypeMeta().Kind, r.GetObjectMeta().Name, err)
				}
			}
		})
	}
}

// TestUnknownFieldsStillRefused checks that a field Calico does not have is
// refused with the path of the field, in the spec and in the metadata.
func TestUnknownFieldsStillRefused(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"kind: FelixConfiguration\nmetadata: {name: default}\nspec: {bpfEnabledd: true}\n", `unknown field "spec.bpfEnabledd"`},
		{"kind: FelixConfiguration\nmetadata: {name: default}\nspec: {goGcThreshold: 4}\n", `unknown field "spec.goGcThreshold" (field names are case-sensitive: did you mean "goGCThreshold"?)`},
		{"kind: IPPool\nmetadata: {name: p, ownerReferences: [{kind: X, name: y, uid: z, apiVersion: v, extra: 1}]}\nspec: {cidr: 10.0.0.0/8}\n", `unknown field "metadata.ownerReferences[0].extra"`},
		{"kind: BGPPeer\nmetadata: {name: p}\nspec: {localAsNumber: 1}\n", `unknown field "spec.localAsNumber"`},
	} {
		_, err := Decode([]byte("apiVersion: projectcalico.org/v3\n" + tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decoding %q: %v, want an error containing %s", tc.doc, err, tc.want)
		}
	}
}

// TestNotActedOnDocumented checks that docs/not-acted-on.md lists exactly
// the rows of the NotActedOn table.
func TestNotActedOnDocumented(t *testing.T) {
	data, err := os.ReadFile("../../../docs/not-acted-on.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	want := 0
	for kind, fields := range NotActedOn {
		for _, f := range fields {
			want++
			if row := "| " + kind + " | `" + f + "` |"; !strings.Contains(doc, row) {
				t.Errorf("docs/not-acted-on.md lacks the row %s", row)
			}
		}
	}
	for _, f := range metadataNotActedOn {
		want++
		if row := "| every kind | `" + f + "` |"; !strings.Contains(doc, row) {
			t.Errorf("docs/not-acted-on.md lacks the row %s", row)
		}
	}
	if got := strings.Count(doc, "\n| ") - 1; got != want {
		t.Errorf("docs/not-acted-on.md has %d rows, the table %d", got, want)
	}
}
