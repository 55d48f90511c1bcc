// Package ipamreport checks, in tests, the report `calicoctl ipam check
// -o FILE` writes against the addresses the live pods hold: after a
// churn run IPAM must hold exactly those, and no handle without one.
package ipamreport

import (
	"encoding/json"
	"net/netip"
	"os"
	"testing"
)

// Report is what the checks read of the report.
type Report struct {
	Allocations   map[string][]Allocation `json:"allocations"`
	LeakedHandles []json.RawMessage       `json:"leakedHandles"`
}

// Allocation is one allocation of an address in the report.
type Allocation struct {
	Handle string `json:"handle"`
	InUse  bool   `json:"inUse"`
}

// Read reads the report at path, failing t when it cannot.
func Read(t testing.TB, path string) Report {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("ipam check report %s: %v", raw, err)
	}
	return rep
}

// CheckLive reads the report at path and fails t unless its allocations
// are exactly the addresses of owner (address → live pod) and no handle
// is leaked.
func CheckLive(t testing.TB, path string, owner map[netip.Addr]string) Report {
	t.Helper()
	rep := Read(t, path)
	for ip, als := range rep.Allocations {
		if a, err := netip.ParseAddr(ip); err != nil || owner[a] == "" {
			t.Errorf("IPAM holds %s (%+v), no live pod's", ip, als)
		}
	}
	if len(rep.Allocations) != len(owner) || len(rep.LeakedHandles) != 0 {
		t.Errorf("ipam check report: %d allocations for %d live pods, %d leaked handles", len(rep.Allocations), len(owner), len(rep.LeakedHandles))
	}
	return rep
}
