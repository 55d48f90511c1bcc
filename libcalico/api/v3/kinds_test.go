package v3

import "testing"

func TestLookupKind(t *testing.T) {
	tests := []struct {
		typed, want string
	}{
		{"ippool", KindIPPool}, {"ipPools", KindIPPool}, {"pool", KindIPPool},
		{"np", KindNetworkPolicy}, {"gnp", KindGlobalNetworkPolicy}, {"netsets", KindNetworkSet},
		{"bgpp", KindBGPPeer}, {"bgpconfig", KindBGPConfiguration}, {"bgpfilters", KindBGPFilter},
		{"no", KindNode}, {"wep", KindWorkloadEndpoint}, {"heps", KindHostEndpoint},
		{"felixconfig", KindFelixConfiguration}, {"clusterinfo", KindClusterInformation},
		{"kubecontrollersconfig", KindKubeControllersConfiguration}, {"ipreservations", KindIPReservation},
		{"ipamconfig", KindIPAMConfiguration}, {"tier", KindTier}, {"pro", KindProfile},
		{"globalnetworksets", KindGlobalNetworkSet},
	}
	for _, tt := range tests {
		k, err := LookupKind(tt.typed)
		if err != nil || k.Kind != tt.want {
			t.Errorf("LookupKind(%q) = %q, %v; want %q", tt.typed, k.Kind, err, tt.want)
		}
	}
	if _, err := LookupKind("pods"); err == nil || err.Error() != `resource type "pods" is not supported` {
		t.Errorf("LookupKind(pods) error = %v", err)
	}
}

// TestKindsConsistent checks every registered kind: New and NewList give
// the right TypeMeta, the list round-trips its items, and aliases are
// unique across kinds.
func TestKindsConsistent(t *testing.T) {
	seen := map[string]string{}
	for _, k := range Kinds() {
		r := k.New()
		if r.GetTypeMeta().Kind != k.Kind || r.GetTypeMeta().APIVersion != APIVersion {
			t.Errorf("%s: New() has TypeMeta %+v", k.Kind, *r.GetTypeMeta())
		}
		l := k.NewList()
		if l.GetTypeMeta().Kind != k.ListKind {
			t.Errorf("%s: NewList() has kind %q, want %q", k.Kind, l.GetTypeMeta().Kind, k.ListKind)
		}
		r.GetObjectMeta().Name = "x"
		if err := l.SetResources([]Resource{r, k.New()}); err != nil {
			t.Errorf("%s: SetResources: %v", k.Kind, err)
		}
		if got := l.Resources(); len(got) != 2 || got[0].GetObjectMeta().Name != "x" {
			t.Errorf("%s: Resources() = %v", k.Kind, got)
		}
		other := &Tier{}
		if k.Kind == KindTier {
			other = nil
		}
		if other != nil {
			if err := l.SetResources([]Resource{other}); err == nil {
				t.Errorf("%s: SetResources accepted a Tier", k.Kind)
			}
		}
		if k.Stored != (k.Kind != KindCalicoAPIConfig) {
			t.Errorf("%s: Stored = %t", k.Kind, k.Stored)
		}
		for _, a := range append([]string{k.Plural}, k.Aliases...) {
			if prev, dup := seen[a]; dup && prev != k.Kind {
				t.Errorf("alias %q belongs to %s and %s", a, prev, k.Kind)
			}
			seen[a] = k.Kind
		}
	}
	if n := len(Kinds()); n != 22 {
		t.Errorf("%d kinds registered, want 22", n)
	}
}
