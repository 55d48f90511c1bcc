package lab

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestPodAddFlagsGolden runs `lab pod add` with each bad --owner and
// --annotations value (refused before any lab is opened, so no lab is
// needed) and its help, and compares what it prints, and that each bad
// value exits 1, with testdata/pod-add.golden.
func TestPodAddFlagsGolden(t *testing.T) {
	bin := filepath.Join(binDir, "lab")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s not built (make build)", bin)
	}
	root := t.TempDir()
	cases := [][]string{
		{"--help"},
		{"--owner", "deployment/web"},
		{"--owner", "replicaset/web-7d4b9"},
		{"--owner", "statefulset"},
		{"--owner", "statefulset/"},
		{"--owner", "sts/Bad_Name"},
		{"--annotations", "cni.projectcalico.org/ipReleasePolicy"},
		{"--annotations", "a=1,,b=2"},
		{"--annotations", "=never"},
		{"--annotations", "bad key=1"},
		{"--annotations", "a=1,a=2"},
		{"--labels", "app"},
	}
	var b strings.Builder
	for _, c := range cases {
		args := append([]string{"--name", "tsticky-none", "--state-dir", root, "pod", "add", "node1", "default/db-0"}, c...)
		out, err := exec.Command(bin, args...).CombinedOutput()
		fmt.Fprintf(&b, "$ lab pod add node1 default/db-0 %s\n(exit %d)\n%s\n", strings.Join(c, " "), exitOf(err), strings.ReplaceAll(string(out), bin, "lab"))
		if want := c[0] == "--help"; (err == nil) != want {
			t.Errorf("pod add %s: exit %d, want %s", strings.Join(c, " "), exitOf(err), map[bool]string{true: "0", false: "1"}[want])
		}
	}
	golden := filepath.Join("testdata", "pod-add.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run TestPodAddFlagsGolden -update writes it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("lab pod add output differs from %s (-update rewrites it):\n%s", golden, b.String())
	}
}

// TestParseOwnerAndAnnotations: the accepted spellings.
func TestParseOwnerAndAnnotations(t *testing.T) {
	for _, s := range []string{"statefulset/db", "StatefulSet/db", "statefulsets/db", "sts/db"} {
		o, err := ParseOwner(s)
		if err != nil || o != (Owner{Kind: "StatefulSet", Name: "db"}) {
			t.Errorf("ParseOwner(%q) = %+v, %v", s, o, err)
		}
	}
	if o, err := ParseOwner(""); err != nil || !o.IsZero() {
		t.Errorf("ParseOwner(\"\") = %+v, %v", o, err)
	}
	a, err := ParseAnnotations("cni.projectcalico.org/ipReleasePolicy=immutable, k8s.v1.cni.galaxy.io/release-policy=,x=a=b")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cni.projectcalico.org/ipReleasePolicy": "immutable", "k8s.v1.cni.galaxy.io/release-policy": "", "x": "a=b"}
	if fmt.Sprint(a) != fmt.Sprint(want) {
		t.Errorf("ParseAnnotations = %v, want %v", a, want)
	}
	for _, c := range []struct {
		o    PodOptions
		name string
		kube bool
		want string
	}{
		{PodOptions{Owner: Owner{Kind: "StatefulSet", Name: "db"}}, "web-0", true, "is named db-<ordinal>"},
		{PodOptions{Owner: Owner{Kind: "StatefulSet", Name: "db"}}, "db-01", true, "is named db-<ordinal>"},
		{PodOptions{Owner: Owner{Kind: "StatefulSet", Name: "db"}}, "db-0", false, "needs --kubernetes"},
		{PodOptions{Annotations: map[string]string{"a": "b"}}, "db-0", false, "needs --kubernetes"},
		{PodOptions{Annotations: map[string]string{"cni.projectcalico.org/ipAddrs": `["10.244.1.1"]`}, IP: netip.MustParseAddr("10.244.1.2")}, "x", true, "give one"},
	} {
		err := c.o.check("default", c.name, c.kube)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check %+v %s kube=%v: %v, want %q", c.o, c.name, c.kube, err, c.want)
		}
	}
	if err := (PodOptions{Owner: Owner{Kind: "StatefulSet", Name: "db"}}).check("default", "db-12", true); err != nil {
		t.Errorf("db-12 of db: %v", err)
	}
}

func exitOf(err error) int {
	if err == nil {
		return 0
	}
	return cmdExit(err)
}
