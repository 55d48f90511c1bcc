package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// handleRecord is a handle as stored, in Calico's JSON shape: per block
// CIDR, how many addresses the handle holds there.
//
// The ID is the key's last segment; like Calico, the value does not hold it.
type handleRecord struct {
	HandleID string         `json:"-"`
	Block    map[string]int `json:"block"`
	Deleted  bool           `json:"deleted"`
}

// decodeHandle parses a stored handle.
func decodeHandle(p datastore.KVPair) (*handleRecord, error) {
	var h handleRecord
	if err := json.Unmarshal(p.Value, &h); err != nil {
		return nil, fmt.Errorf("key %q: decoding handle: %w", p.Key, err)
	}
	if h.Block == nil {
		h.Block = map[string]int{}
	}
	h.HandleID = strings.TrimPrefix(p.Key, handlesPrefix)
	return &h, nil
}

// adjustHandle adds delta (negative to release) to the count handle id
// holds in block cidr, creating the handle when needed and deleting it
// when it holds nothing any more.
func (a *Allocator) adjustHandle(ctx context.Context, id string, cidr netip.Prefix, delta int) error {
	if id == "" || delta == 0 {
		return nil
	}
	key := handleKey(id)
	blockCIDR := cidr.String()
	for attempt := 1; attempt <= maxRetries; attempt++ {
		var err error
		if attempt == 1 && delta > 0 {
			// The usual case is a new handle: try one round trip first.
			err = a.createHandle(ctx, key, id, blockCIDR, delta)
			if err == nil || !errors.Is(err, datastore.ErrAlreadyExists) {
				return err
			}
		}
		err = a.updateHandle(ctx, key, id, blockCIDR, delta)
		if err == nil {
			return nil
		}
		if !isConflict(err) && !errors.Is(err, datastore.ErrNotFound) {
			return err
		}
		if errors.Is(err, datastore.ErrNotFound) && delta < 0 {
			return fmt.Errorf("handle %q: %w", id, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
	return fmt.Errorf("handle %q: %w", id, ErrTooManyRetries)
}

// createHandle stores a new handle holding n addresses in blockCIDR.
func (a *Allocator) createHandle(ctx context.Context, key, id, blockCIDR string, n int) error {
	v, err := json.Marshal(handleRecord{HandleID: id, Block: map[string]int{blockCIDR: n}})
	if err != nil {
		return err
	}
	_, err = a.kv.Create(ctx, datastore.KVPair{Key: key, Value: v})
	return err
}

// updateHandle makes one compare-and-swap attempt at adjusting a handle.
func (a *Allocator) updateHandle(ctx context.Context, key, id, blockCIDR string, delta int) error {
	p, err := a.kv.Get(ctx, key)
	if errors.Is(err, datastore.ErrNotFound) && delta > 0 {
		return a.createHandle(ctx, key, id, blockCIDR, delta)
	}
	if err != nil {
		return err
	}
	h, err := decodeHandle(p)
	if err != nil {
		// A record that does not decode counts nothing: start afresh.
		a.skip(p.Key, badHandle, p.Revision, err)
		h = &handleRecord{HandleID: id, Block: map[string]int{}}
	}
	n := h.Block[blockCIDR] + delta
	if n <= 0 {
		delete(h.Block, blockCIDR)
	} else {
		h.Block[blockCIDR] = n
	}
	if len(h.Block) == 0 {
		return a.kv.Delete(ctx, key, p.Revision)
	}
	v, err := json.Marshal(h)
	if err != nil {
		return err
	}
	_, err = a.kv.Update(ctx, datastore.KVPair{Key: key, Value: v, Revision: p.Revision})
	return err
}

// handleBlocks returns, in address order, the blocks handle id holds
// addresses in, with its record as stored. A record that does not decode
// is logged and counted, and the blocks are then found by their
// allocations; the pair returned then has a nil Value. A handle that does
// not exist fails with an error matching datastore.ErrNotFound.
func (a *Allocator) handleBlocks(ctx context.Context, id string) ([]netip.Prefix, datastore.KVPair, error) {
	p, err := a.kv.Get(ctx, handleKey(id))
	if err != nil {
		return nil, datastore.KVPair{}, fmt.Errorf("handle %q: %w", id, err)
	}
	var out []netip.Prefix
	h, err := decodeHandle(p)
	if err == nil {
		for c := range h.Block {
			cidr, err := netip.ParsePrefix(c)
			if err != nil {
				a.skip(p.Key, badHandle, p.Revision, fmt.Errorf("handle %q: block %q: %w", id, c, err))
				continue
			}
			out = append(out, cidr)
		}
	} else {
		a.skip(p.Key, badHandle, p.Revision, err)
		p.Value = nil
		blocks, err := a.listBlocks(ctx, 0)
		if err != nil {
			return nil, datastore.KVPair{}, err
		}
		for _, sb := range blocks {
			if sb.block.handleCounts()[id] > 0 {
				out = append(out, sb.block.prefix)
			}
		}
	}
	slices.SortFunc(out, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	return out, p, nil
}

// ListHandles returns every handle with its per-block counts, sorted by
// ID.
func (a *Allocator) ListHandles(ctx context.Context) ([]Handle, error) {
	kvs, _, err := a.kv.List(ctx, handlesPrefix)
	if err != nil {
		return nil, fmt.Errorf("listing handles: %w", err)
	}
	out := make([]Handle, 0, len(kvs))
	for _, p := range kvs {
		hd := Handle{ID: p.Key[len(handlesPrefix):], Blocks: map[netip.Prefix]int{}, Revision: p.Revision}
		h, err := decodeHandle(p)
		if err != nil {
			// Listed without counts: releasing it by handle finds its
			// addresses in the blocks.
			a.skip(p.Key, badHandle, p.Revision, err)
			out = append(out, hd)
			continue
		}
		for c, n := range h.Block {
			pfx, err := netip.ParsePrefix(c)
			if err != nil {
				a.skip(p.Key, badHandle, p.Revision, fmt.Errorf("handle %q: block %q: %w", hd.ID, c, err))
				continue
			}
			hd.Blocks[pfx] = n
		}
		out = append(out, hd)
	}
	return out, nil
}

// countHandle returns the value of handle id (whose stored pair is p,
// Revision 0 when absent) holding n more addresses in block cidr.
// A stored record that does not decode is logged and counted, and
// replaced by one counting only these addresses.
func (a *Allocator) countHandle(p datastore.KVPair, id string, cidr netip.Prefix, n int) ([]byte, error) {
	h := &handleRecord{HandleID: id, Block: map[string]int{}}
	if p.Revision != 0 {
		stored, err := decodeHandle(p)
		if err != nil {
			a.skip(p.Key, badHandle, p.Revision, err)
		} else {
			h = stored
		}
	}
	h.Block[cidr.String()] += n
	return json.Marshal(h)
}

// encode serialises a handle for storage.
func (h *handleRecord) encode() ([]byte, error) {
	v, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encoding handle %q: %w", h.HandleID, err)
	}
	return v, nil
}

// DeleteHandle deletes the record of handle id, only while it is still at
// revision (as ListHandles returned it): the release of a handle that
// holds no address, which ipam check reports as leaked. A handle that
// changed or is gone fails with an error matching datastore.ErrConflict or
// datastore.ErrNotFound. Its addresses, if it holds any, are not released.
func (a *Allocator) DeleteHandle(ctx context.Context, id string, revision int64) error {
	if err := checkName("handle ID", id); err != nil {
		return err
	}
	if revision == 0 {
		return fmt.Errorf("handle %q: deleting needs its revision: %w", id, ErrInvalid)
	}
	if err := a.kv.Delete(ctx, handleKey(id), revision); err != nil {
		return fmt.Errorf("handle %q: %w", id, err)
	}
	return nil
}
