package v3

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
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

// TestNotActedOnDocumented checks that the table of docs/not-acted-on.md
// (its "| kind | `field` |" rows) is exactly the NotActedOn table and the
// metadata fields of every kind: no row missing, none extra, none twice.
func TestNotActedOnDocumented(t *testing.T) {
	data, err := os.ReadFile("../../../docs/not-acted-on.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| ([A-Za-z ]+) \\| `([^`]+)` \\|$")
	doc := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			doc[m[1]+" "+m[2]]++
		} else if strings.HasPrefix(line, "| ") && line != "| kind | field |" {
			t.Errorf("docs/not-acted-on.md: table row %q is not of the form | kind | `field` |", line)
		}
	}
	want := map[string]bool{}
	for kind, fields := range NotActedOn {
		for _, f := range fields {
			want[kind+" "+f] = true
		}
	}
	for _, f := range metadataNotActedOn {
		want["every kind "+f] = true
	}
	for r := range want {
		if doc[r] == 0 {
			t.Errorf("docs/not-acted-on.md lacks %s, a row of v3.NotActedOn", r)
		}
	}
	for r, n := range doc {
		if !want[r] {
			t.Errorf("docs/not-acted-on.md lists %s, which is not in v3.NotActedOn (it is acted on, or no such field)", r)
		}
		if n > 1 {
			t.Errorf("docs/not-acted-on.md lists %s %d times", r, n)
		}
	}
}

// TestFelixConfigurationActedOnNamesFields checks that every name of
// FelixConfigurationActedOn is a JSON field of FelixConfigurationSpec: a
// misspelt name would leave the real field listed as not acted on.
func TestFelixConfigurationActedOnNamesFields(t *testing.T) {
	fields := map[string]bool{}
	typ := reflect.TypeFor[FelixConfigurationSpec]()
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		fields[name] = true
	}
	for name := range FelixConfigurationActedOn {
		if !fields[name] {
			t.Errorf("FelixConfigurationActedOn names %q, which is no field of FelixConfigurationSpec", name)
		}
	}
}
