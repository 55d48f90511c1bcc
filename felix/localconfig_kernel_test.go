package felix

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestLocalConfigWins runs felix with FELIX_DEFAULTENDPOINTTOHOSTACTION
// in its environment (as Calico's manifests set it) and
// chainInsertMode in its config file: a pod reaches the node although the
// datastore's FelixConfiguration keeps the default (Drop) and the file
// says Drop too, and felix's jumps go after another program's rules; an
// unknown FELIX_ variable is named in a warning.
func TestLocalConfigWins(t *testing.T) {
	hook := logtest.NewGlobal()
	defer logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	c := newClusterNoFelix(t, "NFT", false)
	file := filepath.Join(t.TempDir(), "felix.cfg")
	if err := os.WriteFile(file, []byte("[global]\nChainInsertMode = append\nDefaultEndpointToHostAction = Drop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A rule of another program in each kernel chain (no verdict).
	for _, chain := range []string{"INPUT", "FORWARD", "OUTPUT"} {
		c.node.MustRun(t, "iptables-nft", "-A", chain, "-m", "comment", "--comment", "another program")
	}
	cfg := c.felixConfigOf()
	cfg.Environ = []string{"FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT", "FELIX_NOSUCHTHING=1", "HOME=/root"}
	cfg.ConfigFile = file
	runFelix(t, c.ctx, c.cancel, cfg)
	c.addPod("ns-a", "a", "10.65.0.10", map[string]string{"app": "a"}, "sa-x")
	// Not c.expect: its explanation from the datastore cannot see
	// felix's environment.
	c.waitFor("a→node tcp/22 allowed", func() bool { ok, _ := c.send(probe{from: "a", to: "node", proto: "tcp", port: 22}); return ok })
	if !c.jumpsAt(false) {
		t.Error("felix's jumps are not last (config file chainInsertMode Append)")
	}
	c.waitWarning(hook, "not FelixConfiguration parameters")
}
