package ipam

import (
	"context"
	"errors"
	"fmt"
	"time"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// defaultMaxBlocks caps a node's blocks when neither the request nor the
// configuration does, as Calico does against runaway claiming.
const defaultMaxBlocks = 20

// configKey names the one IPAMConfiguration.
var configKey = datastore.Key{Kind: v3.KindIPAMConfiguration, Name: v3.IPAMConfigName}

// GetConfig reads the IPAMConfiguration "default"; when there is none, the
// record Calico's IPAM keeps at /calico/ipam/v2/config (which `calicoctl
// ipam configure` writes on a Calico cluster); when there is neither, it
// returns Calico's defaults (no strict affinity, automatic block
// allocation, no block cap).
func (a *Allocator) GetConfig(ctx context.Context) (Config, error) {
	cfg, _, err := a.getConfigAt(ctx)
	return cfg, err
}

// getConfigAt reads the configuration with the conditions under which it
// is still current.
func (a *Allocator) getConfigAt(ctx context.Context) (Config, []datastore.KVCond, error) {
	path, err := datastore.KeyPath(configKey)
	if err != nil {
		return Config{}, nil, err
	}
	r, err := a.store.Get(ctx, configKey)
	if errors.Is(err, datastore.ErrNotFound) {
		return a.getCalicoConfig(ctx, datastore.KVCond{Key: path})
	}
	var bv *datastore.BadValueError
	if errors.As(err, &bv) {
		// Logged and counted by the store: Calico's defaults apply
		// until the configuration is written again.
		return Config{AutoAllocateBlocks: true}, []datastore.KVCond{{Key: path, Revision: bv.Revision}}, nil
	}
	if err != nil {
		return Config{}, nil, fmt.Errorf("reading IPAM configuration: %w", err)
	}
	c, ok := r.(*v3.IPAMConfiguration)
	if !ok {
		return Config{}, nil, fmt.Errorf("reading IPAM configuration: got a %T", r)
	}
	cond, err := resourceCond(v3.KindIPAMConfiguration, r)
	if err != nil {
		return Config{}, nil, err
	}
	cfg := Config{
		StrictAffinity:     c.Spec.StrictAffinity,
		AutoAllocateBlocks: c.Spec.AutoAllocateBlocks == nil || *c.Spec.AutoAllocateBlocks,
		MaxBlocksPerHost:   int(c.Spec.MaxBlocksPerHost),
	}
	if s := c.Spec.IPCooldownSeconds; s != nil && *s > 0 {
		cfg.IPCooldown = time.Duration(*s) * time.Second
	}
	return cfg, []datastore.KVCond{cond}, nil
}

// SetConfig writes the IPAMConfiguration "default", keeping its other
// metadata.
func (a *Allocator) SetConfig(ctx context.Context, cfg Config) error {
	if cfg.MaxBlocksPerHost < 0 {
		return fmt.Errorf("ipamconfiguration %q: spec.maxBlocksPerHost %d must not be negative: %w", v3.IPAMConfigName, cfg.MaxBlocksPerHost, ErrInvalid)
	}
	auto := cfg.AutoAllocateBlocks
	c := &v3.IPAMConfiguration{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindIPAMConfiguration, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: v3.IPAMConfigName},
		Spec: v3.IPAMConfigurationSpec{
			StrictAffinity:     cfg.StrictAffinity,
			MaxBlocksPerHost:   int32(cfg.MaxBlocksPerHost),
			AutoAllocateBlocks: &auto,
		},
	}
	if cfg.IPCooldown > 0 {
		s := int32(cfg.IPCooldown / time.Second)
		c.Spec.IPCooldownSeconds = &s
	}
	if r, err := a.store.Get(ctx, configKey); err == nil {
		old := r.GetObjectMeta()
		c.Labels, c.Annotations = old.Labels, old.Annotations
	}
	if _, err := a.store.Apply(ctx, c); err != nil {
		return fmt.Errorf("writing IPAM configuration: %w", err)
	}
	return a.putCalicoConfig(ctx, cfg)
}

// blockCap is the block limit for a request: the tighter of the request's
// and the configuration's, else the default.
func blockCap(requested, configured int) int {
	switch {
	case requested > 0 && configured > 0:
		return min(requested, configured)
	case requested > 0:
		return requested
	case configured > 0:
		return configured
	}
	return defaultMaxBlocks
}

// coolFrom is the release time of addresses released now: now when the
// configuration sets ipCooldownSeconds (the addresses cool down from
// then), zero when it does not (they are free at once).
func (a *Allocator) coolFrom(ctx context.Context) (time.Time, error) {
	cfg, _, err := a.getConfigAt(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if cfg.IPCooldown <= 0 {
		return time.Time{}, nil
	}
	return time.Now(), nil
}
