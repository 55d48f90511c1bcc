package calc

import (
	"strings"
	"testing"
)

// TestStagedPoliciesAreNotSynced checks that felix never reads the staged
// policy kinds: like Calico, Palisade stores them but never enforces them.
func TestStagedPoliciesAreNotSynced(t *testing.T) {
	for _, k := range SyncedKinds() {
		if strings.HasPrefix(k, "Staged") {
			t.Errorf("felix syncs %s, which must never be enforced", k)
		}
	}
}
