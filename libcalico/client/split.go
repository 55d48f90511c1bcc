package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"net/netip"
	"time"

	"github.com/google/uuid"
	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// maxSplit is the most pools one split makes: with the pool's delete, one
// etcd transaction takes at most 128 operations.
const maxSplit = 64

// SplitCIDR cuts cidr into parts networks of equal size; parts must be a
// power of two (and not 1) that fits in the prefix. The messages are
// Calico's.
func SplitCIDR(cidr netip.Prefix, parts int) ([]netip.Prefix, error) {
	if parts < 2 || parts&(parts-1) != 0 {
		return nil, fmt.Errorf("number to split CIDR into is not a valid power of 2: %d", parts)
	}
	power := bits.TrailingZeros(uint(parts))
	cidr = cidr.Masked()
	if cidr.Bits()+power > cidr.Addr().BitLen() {
		return nil, fmt.Errorf("the CIDR %s is not large enough to be split into %d parts", cidr, parts)
	}
	size := new(big.Int).Lsh(big.NewInt(1), uint(cidr.Addr().BitLen()-cidr.Bits()-power))
	base := new(big.Int).SetBytes(cidr.Addr().AsSlice())
	out := make([]netip.Prefix, parts)
	for i := range parts {
		n := new(big.Int).Add(base, new(big.Int).Mul(size, big.NewInt(int64(i))))
		b := n.FillBytes(make([]byte, cidr.Addr().BitLen()/8))
		a, _ := netip.AddrFromSlice(b)
		out[i] = netip.PrefixFrom(a, cidr.Bits()+power)
	}
	return out, nil
}

// SplitIPPool replaces the stored IP pool with parts pools of equal size
// that cover the same network, as Calico's `calicoctl ipam split` does:
// each is named split-<name>-<i>, carries the pool's labels, annotations
// and spec (blockSize, nodeSelector, modes, …) with its part of the CIDR,
// and is enabled. Every new pool is validated (an enabled pool must hold
// at least one block) and checked against the other pools before anything
// is written; the pool's delete and the creations are then one
// transaction on kv, conditional on the pool being unchanged since it was
// read and on the new names being free, so the split is all or nothing.
// Blocks and affinities need no change: each block lies in one new pool.
func (c *Client) SplitIPPool(ctx context.Context, kv datastore.KV, pool *v3.IPPool, parts int) ([]*v3.IPPool, error) {
	cidr, err := netip.ParsePrefix(pool.Spec.CIDR)
	if err != nil {
		return nil, fmt.Errorf("IPPool %q: spec.cidr %q: %w", pool.Name, pool.Spec.CIDR, err)
	}
	cidrs, err := SplitCIDR(cidr, parts)
	if err != nil {
		return nil, err
	}
	if parts > maxSplit {
		return nil, fmt.Errorf("a pool is split into at most %d pools, not %d", maxSplit, parts)
	}
	parentKey := datastore.Key{Kind: v3.KindIPPool, Name: pool.Name}
	parentPath, err := datastore.KeyPath(parentKey)
	if err != nil {
		return nil, err
	}
	rev, err := datastore.ParseRevision(pool.ResourceVersion)
	if err != nil || rev == 0 {
		return nil, fmt.Errorf("IPPool %q: a pool to split must be read from the datastore (resourceVersion %q)", pool.Name, pool.ResourceVersion)
	}

	stored, _, err := c.store.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		return nil, fmt.Errorf("reading the stored IP pools: %w", err)
	}
	others := map[string]v3.Resource{}
	for _, p := range stored {
		if path, err := datastore.KeyPath(datastore.KeyOf(p)); err == nil && path != parentPath {
			others[path] = p
		}
	}

	codec := datastore.NewCodec()
	now := v3.NewTime(time.Now())
	conds := []datastore.KVCond{{Key: parentPath, Revision: rev}}
	ops := []datastore.KVOp{{Key: parentPath, Delete: true}}
	children := make([]*v3.IPPool, len(cidrs))
	for i, sub := range cidrs {
		child, err := splitChild(pool, i, sub)
		if err != nil {
			return nil, err
		}
		prepared, err := c.Prepare(child)
		if err != nil {
			return nil, err
		}
		if err := checkCross(prepared, others, ""); err != nil {
			return nil, err
		}
		path, err := datastore.KeyPath(datastore.KeyOf(prepared))
		if err != nil {
			return nil, err
		}
		val, obj, err := codec.Encode(prepared, uuid.NewString(), now)
		if err != nil {
			return nil, err
		}
		conds = append(conds, datastore.KVCond{Key: path, Revision: 0})
		ops = append(ops, datastore.KVOp{Key: path, Value: val})
		children[i] = obj.(*v3.IPPool)
	}
	written, _, err := kv.Txn(ctx, conds, ops)
	if errors.Is(err, datastore.ErrConflict) {
		return nil, fmt.Errorf("IPPool %q changed since it was read, or a pool named split-%s-N exists: nothing was written", pool.Name, pool.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("splitting IPPool %q: %w", pool.Name, err)
	}
	for _, ch := range children {
		ch.ResourceVersion = fmt.Sprint(written)
	}
	log.WithFields(log.Fields{"pool": pool.Name, "cidr": cidr, "parts": parts}).Info("Split IP pool")
	return children, nil
}

// splitChild is the i-th pool of pool's split: a copy named
// split-<name>-<i> (the name cut so it stays a valid name), with cidr,
// enabled, and without the identity of the pool it came from.
func splitChild(pool *v3.IPPool, i int, cidr netip.Prefix) (*v3.IPPool, error) {
	b, err := json.Marshal(pool)
	if err != nil {
		return nil, err
	}
	child := &v3.IPPool{}
	if err := json.Unmarshal(b, child); err != nil {
		return nil, err
	}
	name := pool.Name
	if len(name) > 245 {
		name = name[:245]
	}
	m := &child.ObjectMeta
	m.Name = fmt.Sprintf("split-%s-%d", name, i)
	m.UID, m.ResourceVersion, m.SelfLink, m.GenerateName = "", "", "", ""
	m.Generation, m.CreationTimestamp = 0, v3.Time{}
	child.Spec.CIDR = cidr.String()
	child.Spec.Disabled = false
	return child, nil
}
