package calc

import (
	"context"
	"net/netip"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// BlockSource is where the syncer reads IPAM blocks: a List of the raw
// keys, then a watch from its revision.
type BlockSource struct {
	KV      datastore.KV
	Watcher datastore.KVWatcher
}

// runBlocks lists and watches the IPAM blocks for ever, as runKind does
// for a kind, passing each as a *Block under KindIPAMBlock.
func (s *Syncer) runBlocks(ctx context.Context, ch chan<- kindBatch) {
	known := map[string]netip.Prefix{} // block key → CIDR
	logc := log.WithField("kind", KindIPAMBlock)
	send := sender(ctx, ch)
	update := func(p datastore.KVPair) (Update, bool) {
		b, err := ipam.ParseBlock(p)
		if err != nil {
			logc.WithError(err).WithField("key", p.Key).Warn("Skipping an IPAM block that does not decode")
			return Update{}, false
		}
		known[p.Key] = b.CIDR
		return Update{Key: datastore.Key{Kind: KindIPAMBlock, Name: b.CIDR.String()}, Value: BlockFromIPAM(b)}, true
	}
	gone := func(key string) (Update, bool) {
		cidr, ok := known[key]
		if !ok {
			return Update{}, false
		}
		delete(known, key)
		return Update{Key: datastore.Key{Kind: KindIPAMBlock, Name: cidr.String()}}, true
	}
	for ctx.Err() == nil {
		pairs, rev, err := s.Blocks.KV.List(ctx, ipam.BlocksPrefix)
		if err != nil {
			logc.WithError(err).Warn("Listing failed; retrying")
			s.pause(ctx)
			continue
		}
		b := kindBatch{kind: KindIPAMBlock, listed: true}
		seen := map[string]bool{}
		for _, p := range pairs {
			seen[p.Key] = true
			if u, ok := update(p); ok {
				b.updates = append(b.updates, u)
			}
		}
		for key := range known {
			if !seen[key] {
				if u, ok := gone(key); ok {
					b.updates = append(b.updates, u)
				}
			}
		}
		if !send(b) {
			return
		}
		events, err := s.Blocks.Watcher.WatchKV(ctx, ipam.BlocksPrefix, rev)
		if err != nil {
			logc.WithError(err).Warn("Watch failed; listing again")
			s.pause(ctx)
			continue
		}
		for ev := range events {
			var u Update
			ok := false
			if ev.Type == datastore.Deleted {
				u, ok = gone(ev.Pair.Key)
			} else {
				u, ok = update(ev.Pair)
			}
			if ok && !send(kindBatch{kind: KindIPAMBlock, updates: []Update{u}}) {
				return
			}
		}
		if ctx.Err() == nil {
			logc.Info("Watch ended; listing again")
			s.pause(ctx)
		}
	}
}
