package client_test

import (
	"errors"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

func filteredPeer(name string, filters ...string) *v3.BGPPeer {
	return &v3.BGPPeer{ObjectMeta: v3.ObjectMeta{Name: name},
		Spec: v3.BGPPeerSpec{PeerIP: "198.18.0.9", ASNumber: 65009, Filters: filters}}
}

func filter(name string) *v3.BGPFilter {
	return &v3.BGPFilter{ObjectMeta: v3.ObjectMeta{Name: name},
		Spec: v3.BGPFilterSpec{ExportV4: []v3.BGPFilterRuleV4{{Action: v3.BGPFilterReject}}}}
}

// TestPeerNeedsItsFilters checks that a BGPPeer naming a BGPFilter that
// does not exist is refused on every write, as Calico refuses it, with
// nothing stored, and that a filter written earlier in the batch counts.
func TestPeerNeedsItsFilters(t *testing.T) {
	c, ctx := newClient(t)
	for _, op := range []client.Op{client.OpCreate, client.OpApply} {
		res := c.Write(ctx, op, []v3.Resource{filteredPeer("tor", "no-such-filter")})[0]
		if !errors.Is(res.Err, datastore.ErrNotFound) ||
			!strings.Contains(res.Err.Error(), `spec.filters names BGPFilter "no-such-filter", which does not exist`) {
			t.Errorf("%s of a peer naming a missing filter: %v, want the filter's not-found error", op, res.Err)
		}
	}
	if items, _, err := c.List(ctx, datastore.ListOptions{}); err != nil || len(items) != 0 {
		t.Fatalf("after refused writes the store holds %d resources (%v)", len(items), err)
	}
	res := c.Write(ctx, client.OpApply, []v3.Resource{filter("a"), filteredPeer("p1", "a"), filteredPeer("p2", "a", "late"), filter("late")})
	for i, want := range []bool{true, true, false, true} {
		if (res[i].Err == nil) != want {
			t.Errorf("batch item %d: error %v, want success %v", i, res[i].Err, want)
		}
	}
	// An update may not name a missing filter either.
	if _, err := c.Update(ctx, filteredPeer("p1", "gone")); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("update naming a missing filter: %v, want refused", err)
	}
}
