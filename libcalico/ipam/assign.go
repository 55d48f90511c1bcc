package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// AssignIP assigns one specific address. The address must lie in a
// configured pool (disabled pools included, as in Calico); reservations do
// not apply to an explicit request. When the address's block does not
// exist yet it is created, affine to args.Hostname when that is set. An
// address already in use fails with ErrAlreadyAssigned.
func (a *Allocator) AssignIP(ctx context.Context, args AssignIPArgs) error {
	if !args.IP.IsValid() {
		return fmt.Errorf("assign IP: no address given: %w", ErrInvalid)
	}
	ip := args.IP.Unmap()
	if args.HandleID != "" {
		if err := checkName("handle ID", args.HandleID); err != nil {
			return fmt.Errorf("assign IP %s: %w", ip, err)
		}
	}
	if args.Hostname != "" {
		if err := checkName("host name", args.Hostname); err != nil {
			return fmt.Errorf("assign IP %s: %w", ip, err)
		}
	}
	pools, err := a.listPools(ctx)
	if err != nil {
		return fmt.Errorf("assign IP %s: %w", ip, err)
	}
	p, ok := poolFor(pools, ip)
	if !ok {
		return fmt.Errorf("assign IP %s: %w", ip, ErrNotInPool)
	}
	if args.Intent != "" && !p.allows(args.Intent) {
		return fmt.Errorf("assign IP %s: ippool %q allows no %s use: %w", ip, p.name, args.Intent, ErrNoPools)
	}
	cfg, err := a.GetConfig(ctx)
	if err != nil {
		return fmt.Errorf("assign IP %s: %w", ip, err)
	}
	cidr := p.blockFor(ip)
	key := blockKey(cidr)
	logCtx := log.WithFields(log.Fields{"ip": ip, "handle": args.HandleID, "block": cidr})

	credit := false
	undo := func() error {
		if credit {
			return a.adjustHandle(ctx, args.HandleID, cidr, -1)
		}
		return nil
	}
	for attempt := 1; attempt <= maxRetries; attempt++ {
		b, rev, err := a.getBlock(ctx, key)
		if errors.Is(err, datastore.ErrNotFound) {
			b, rev, err = a.createBlockFor(ctx, args.Hostname, cidr)
		}
		if err != nil {
			return errors.Join(fmt.Errorf("assign IP %s: %w", ip, err), undo())
		}
		b.reclaim(time.Now(), cfg.IPCooldown)
		if err := b.assignAddr(ip, args.HandleID, args.Attrs); err != nil {
			return errors.Join(fmt.Errorf("assign IP: %w", err), undo())
		}
		if !credit {
			if err := a.adjustHandle(ctx, args.HandleID, cidr, 1); err != nil {
				return fmt.Errorf("assign IP %s: %w", ip, err)
			}
			credit = true
		}
		err = a.putBlock(ctx, key, b, rev)
		if err == nil {
			logCtx.Info("Assigned address")
			return nil
		}
		if !isConflict(err) && !errors.Is(err, datastore.ErrNotFound) {
			return errors.Join(fmt.Errorf("assign IP %s: writing block %s: %w", ip, cidr, err), undo())
		}
		if err := backoff(ctx, attempt); err != nil {
			return errors.Join(err, undo())
		}
	}
	return errors.Join(fmt.Errorf("assign IP %s: block %s: %w", ip, cidr, ErrTooManyRetries), undo())
}

// createBlockFor makes the block cidr exist: claimed for host when set
// (another node's block is used as it is), created without affinity
// otherwise.
func (a *Allocator) createBlockFor(ctx context.Context, host string, cidr netip.Prefix) (*block, int64, error) {
	if host != "" {
		b, rev, _, err := a.claimBlock(ctx, host, cidr)
		if !errors.Is(err, errBlockTaken) {
			return b, rev, err
		}
		return a.getBlock(ctx, blockKey(cidr))
	}
	v, err := newBlock(cidr, "").encode()
	if err != nil {
		return nil, 0, err
	}
	p, err := a.kv.Create(ctx, datastore.KVPair{Key: blockKey(cidr), Value: v})
	if errors.Is(err, datastore.ErrAlreadyExists) {
		return a.getBlock(ctx, blockKey(cidr))
	}
	if err != nil {
		return nil, 0, err
	}
	return newBlock(cidr, ""), p.Revision, nil
}
