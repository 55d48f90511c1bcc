package cniplugin

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under cni-plugin/testdata/golden")

// macRE matches MAC addresses; sandboxRE the pod's namespace path.
var (
	macRE     = regexp.MustCompile(`"([0-9a-f]{2}:){5}[0-9a-f]{2}"`)
	sandboxRE = regexp.MustCompile(`"/[^"]*/netns/[^"]*"`)
)

// TestAddResultGolden compares the result ADD prints, in every spec
// version, with testdata/golden/add-result-<version>.json. The container's
// MAC and namespace path change every run and are masked; the host MAC
// ee:ee:ee:ee:ee:ee is kept.
func TestAddResultGolden(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-a", "10.81.0.0/16", 26)
	for _, ver := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(ver, func(t *testing.T) {
			// A node of its own, so the address does not depend on which
			// other versions ran before.
			n := c.newNode("node-" + strings.ReplaceAll(ver, ".", ""))
			list := n.calicoConf(ver, nil)
			p := n.newPod("golden", "web-"+ver)
			// A fixed handle in the result's context; container IDs have no dots
			// (Calico refuses them, and so does the WorkloadEndpoint check).
			p.containerID = "0123456789abcdef" + strings.ReplaceAll(ver, ".", "")
			res, err := n.add(list, p.runtimeConf(true))
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			t.Cleanup(func() { _ = n.del(list, p.runtimeConf(true)) })
			raw, err := json.MarshalIndent(res, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got := sandboxRE.ReplaceAll(raw, []byte(`"<netns>"`))
			got = macRE.ReplaceAllFunc(got, func(m []byte) []byte {
				if string(m) == `"ee:ee:ee:ee:ee:ee"` {
					return m
				}
				return []byte(`"<container-mac>"`)
			})
			got = append(got, '\n')
			file := filepath.Join("testdata", "golden", "add-result-"+ver+".json")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("ADD result differs from %s:\n got:\n%s\nwant:\n%s", file, got, want)
			}
		})
	}
}
