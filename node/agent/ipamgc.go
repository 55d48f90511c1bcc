package agent

import (
	"context"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/ipam"
)

// Unused-block release, as Calico's IPAM garbage collection does it: a
// block of this node empty for unusedBlockGrace loses its affinity while
// the node keeps another block.
const (
	unusedBlockGrace = 15 * time.Minute
	unusedBlockCheck = time.Minute
)

// releaseUnusedBlocks looks at the node's blocks every unusedBlockCheck
// until ctx ends and releases the unused ones.
func releaseUnusedBlocks(ctx context.Context, alloc *ipam.Allocator, node string, logger *log.Entry) {
	var empty ipam.EmptyBlocks
	t := time.NewTicker(unusedBlockCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if _, err := alloc.ReleaseUnusedBlocks(ctx, node, &empty, unusedBlockGrace, now); err != nil && ctx.Err() == nil {
				logger.WithError(err).Warn("Releasing unused IPAM blocks")
			}
		}
	}
}
