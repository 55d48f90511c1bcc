package client

import (
	"context"
	"fmt"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// policyKinds are the kinds that belong to a tier (spec.tier), whose tier
// must exist when they are created and keeps a tier from being deleted.
var policyKinds = []string{
	v3.KindNetworkPolicy, v3.KindGlobalNetworkPolicy,
	v3.KindStagedNetworkPolicy, v3.KindStagedGlobalNetworkPolicy,
}

// tierOf returns the tier of a policy ("default" when it names none) and
// whether r is of a kind that has one.
func tierOf(r v3.Resource) (string, bool) {
	var tier string
	switch p := r.(type) {
	case *v3.NetworkPolicy:
		tier = p.Spec.Tier
	case *v3.GlobalNetworkPolicy:
		tier = p.Spec.Tier
	case *v3.StagedNetworkPolicy:
		tier = p.Spec.Tier
	case *v3.StagedGlobalNetworkPolicy:
		tier = p.Spec.Tier
	default:
		return "", false
	}
	if tier == "" {
		tier = v3.DefaultTierName
	}
	return tier, true
}

// neededTier is the Tier a policy's creation needs stored: none for the
// default tier, which always exists (Palisade treats it as present whether
// or not a Tier resource for it is stored).
func neededTier(r v3.Resource) (datastore.Key, bool) {
	tier, ok := tierOf(r)
	if !ok || tier == v3.DefaultTierName {
		return datastore.Key{}, false
	}
	return datastore.Key{Kind: v3.KindTier, Name: tier}, true
}

// builtinTiers are the tiers Calico never deletes.
var builtinTiers = map[string]bool{
	v3.DefaultTierName:      true,
	v3.KubeAdminTierName:    true,
	v3.KubeBaselineTierName: true,
	// Palisade's kube-controllers owns these two and writes them back.
	v3.AdminNetworkPolicyTierName:         true,
	v3.BaselineAdminNetworkPolicyTierName: true,
}

// checkTierDelete refuses what Calico refuses: deleting a built-in tier,
// or a tier that policies (staged ones included) still belong to.
func (c *Client) checkTierDelete(ctx context.Context, name string) error {
	if builtinTiers[name] {
		return ruleErrorf(ErrNotSupported, "operation Delete is not supported on %s: Cannot delete %s tier", name, name)
	}
	for _, kind := range policyKinds {
		items, _, err := c.store.List(ctx, datastore.ListOptions{Kind: kind})
		if err != nil {
			return fmt.Errorf("checking that tier %q is empty: listing %s: %w", name, kind, err)
		}
		for _, it := range items {
			if tier, _ := tierOf(it); tier == name {
				return ruleErrorf(ErrNotSupported, "operation delete is not supported on %s: Cannot delete a non-empty tier", name)
			}
		}
	}
	return nil
}
