package commands

import (
	"context"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// deleteOne deletes the resource at k. A Node takes along what belongs to
// it (client.DeleteNode: its addresses, endpoints, affinities, empty
// blocks, BGPPeers, node configurations), as Calico's calicoctl does.
func deleteOne(ctx context.Context, s *ipamSession, k datastore.Key) error {
	if k.Kind == v3.KindNode {
		_, _, err := s.client.DeleteNode(ctx, s.alloc, k.Name, "")
		return err
	}
	_, err := s.client.Delete(ctx, k, "")
	return err
}
