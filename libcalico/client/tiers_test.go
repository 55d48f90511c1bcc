package client_test

import (
	"errors"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

func tier(name string) *v3.Tier {
	return &v3.Tier{ObjectMeta: v3.ObjectMeta{Name: name}}
}

func np(ns, name, tier string) *v3.NetworkPolicy {
	return &v3.NetworkPolicy{ObjectMeta: v3.ObjectMeta{Namespace: ns, Name: name}, Spec: v3.NetworkPolicySpec{Tier: tier}}
}

// TestPolicyNeedsItsTier checks that every tiered policy kind is created
// and applied only in a tier that exists (default always does), as
// Calico's client does, while an update is not checked.
func TestPolicyNeedsItsTier(t *testing.T) {
	c, ctx := newClient(t)
	policies := []v3.Resource{
		np("prod", "web", "security"),
		&v3.GlobalNetworkPolicy{ObjectMeta: v3.ObjectMeta{Name: "gnp"}, Spec: v3.GlobalNetworkPolicySpec{Tier: "security"}},
		&v3.StagedNetworkPolicy{ObjectMeta: v3.ObjectMeta{Namespace: "prod", Name: "snp"}, Spec: v3.StagedNetworkPolicySpec{Tier: "security"}},
		&v3.StagedGlobalNetworkPolicy{ObjectMeta: v3.ObjectMeta{Name: "sgnp"}, Spec: v3.StagedGlobalNetworkPolicySpec{Tier: "security"}},
	}
	for _, op := range []client.Op{client.OpCreate, client.OpApply} {
		for _, p := range policies {
			res := c.Write(ctx, op, []v3.Resource{p})[0]
			if !errors.Is(res.Err, datastore.ErrNotFound) || !strings.Contains(res.Err.Error(), `is in tier "security", which does not exist`) {
				t.Errorf("%s %s in a missing tier: %v, want the tier's not-found error", op, p.GetTypeMeta().Kind, res.Err)
			}
			var nf *datastore.NotFoundError
			if errors.As(res.Err, &nf) && nf.Key != (datastore.Key{Kind: v3.KindTier, Name: "security"}) {
				t.Errorf("%s %s: not-found key %v, want Tier(security)", op, p.GetTypeMeta().Kind, nf.Key)
			}
		}
	}
	if items, _, err := c.List(ctx, datastore.ListOptions{}); err != nil || len(items) != 0 {
		t.Fatalf("after refused writes the store holds %d resources (%v)", len(items), err)
	}
	// The default tier needs no Tier resource.
	if _, err := c.Create(ctx, np("prod", "default-tier", "")); err != nil {
		t.Fatalf("policy in the default tier: %v", err)
	}
	// A Tier earlier in the same batch counts; one later does not.
	res := c.Write(ctx, client.OpApply, []v3.Resource{tier("security"), policies[0], policies[1], np("prod", "early", "late"), tier("late")})
	for i, want := range []bool{true, true, true, false, true} {
		if (res[i].Err == nil) != want {
			t.Errorf("batch item %d: error %v, want success %v", i, res[i].Err, want)
		}
	}
	// Updates are not checked, as in Calico.
	if _, err := c.Update(ctx, np("prod", "web", "elsewhere")); err != nil {
		t.Errorf("update into a missing tier: %v (Calico does not refuse it)", err)
	}
}

// TestTierDelete checks that built-in tiers and tiers policies still
// belong to are not deleted, with Calico's messages, and an empty tier is.
func TestTierDelete(t *testing.T) {
	c, ctx := newClient(t)
	for _, r := range []v3.Resource{tier("t1"), tier("t2"), tier("t3"),
		&v3.Tier{ObjectMeta: v3.ObjectMeta{Name: v3.DefaultTierName}, Spec: v3.TierSpec{Order: ptr(v3.DefaultTierOrder)}},
		np("prod", "web", "t1"),
		&v3.StagedGlobalNetworkPolicy{ObjectMeta: v3.ObjectMeta{Name: "s"}, Spec: v3.StagedGlobalNetworkPolicySpec{Tier: "t2"}}} {
		if _, err := c.Create(ctx, r); err != nil {
			t.Fatalf("creating %s %s: %v", r.GetTypeMeta().Kind, r.GetObjectMeta().Name, err)
		}
	}
	cases := []struct{ name, want string }{
		{"default", "operation Delete is not supported on default: Cannot delete default tier"},
		{"kube-admin", "operation Delete is not supported on kube-admin: Cannot delete kube-admin tier"},
		{"kube-baseline", "operation Delete is not supported on kube-baseline: Cannot delete kube-baseline tier"},
		{"t1", "operation delete is not supported on t1: Cannot delete a non-empty tier"},
		{"t2", "operation delete is not supported on t2: Cannot delete a non-empty tier"},
		{"t3", ""},
	}
	for _, tc := range cases {
		_, err := c.Delete(ctx, datastore.Key{Kind: v3.KindTier, Name: tc.name}, "")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("deleting empty tier %s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, client.ErrNotSupported) || err.Error() != tc.want):
			t.Errorf("deleting tier %s: %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, name := range []string{"t1", "t2", "default"} {
		if _, err := c.Get(ctx, datastore.Key{Kind: v3.KindTier, Name: name}); err != nil {
			t.Errorf("tier %s is gone after a refused delete: %v", name, err)
		}
	}
	// Once its policy is gone, t1 goes too.
	if _, err := c.Delete(ctx, datastore.Key{Kind: v3.KindNetworkPolicy, Namespace: "prod", Name: "web"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, datastore.Key{Kind: v3.KindTier, Name: "t1"}, ""); err != nil {
		t.Errorf("deleting emptied tier t1: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
