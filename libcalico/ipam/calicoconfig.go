package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// calicoConfigKey is where Calico's IPAM keeps its configuration in an
// etcd datastore, apart from the IPAMConfiguration resource: Calico's
// calico-ipam and `calicoctl ipam configure` read and write only this
// record, so a cluster moving from Calico has its strict affinity here.
const calicoConfigKey = datastore.IPAMPrefix + "config"

// calicoConfig is that record, in Calico's JSON shape.
type calicoConfig struct {
	StrictAffinity     bool `json:"strict_affinity,omitempty"`
	AutoAllocateBlocks bool `json:"auto_allocate_blocks,omitempty"`
	MaxBlocksPerHost   int  `json:"maxBlocksPerHost,omitempty"`
}

// getCalicoConfig reads Calico's IPAM record when no IPAMConfiguration is
// stored; resCond is the condition that the resource is still absent.
func (a *Allocator) getCalicoConfig(ctx context.Context, resCond datastore.KVCond) (Config, []datastore.KVCond, error) {
	p, err := a.kv.Get(ctx, calicoConfigKey)
	if errors.Is(err, datastore.ErrNotFound) {
		return Config{AutoAllocateBlocks: true}, []datastore.KVCond{resCond, {Key: calicoConfigKey}}, nil
	}
	if err != nil {
		return Config{}, nil, fmt.Errorf("reading Calico's IPAM configuration %s: %w", calicoConfigKey, err)
	}
	conds := []datastore.KVCond{resCond, {Key: calicoConfigKey, Revision: p.Revision}}
	var c calicoConfig
	if err := json.Unmarshal(p.Value, &c); err != nil {
		log.WithError(err).WithField("key", calicoConfigKey).Warn("Calico's IPAM configuration does not decode; using Calico's defaults")
		return Config{AutoAllocateBlocks: true}, conds, nil
	}
	return Config{StrictAffinity: c.StrictAffinity, AutoAllocateBlocks: c.AutoAllocateBlocks, MaxBlocksPerHost: c.MaxBlocksPerHost}, conds, nil
}

// putCalicoConfig writes Calico's IPAM record beside the resource, so that
// Calico nodes still running while a cluster moves to Palisade allocate
// under the same configuration.
func (a *Allocator) putCalicoConfig(ctx context.Context, cfg Config) error {
	// The record has no cooldown (the IPAMConfiguration resource
	// carries ipCooldownSeconds).
	v, err := json.Marshal(calicoConfig{StrictAffinity: cfg.StrictAffinity, AutoAllocateBlocks: cfg.AutoAllocateBlocks, MaxBlocksPerHost: cfg.MaxBlocksPerHost})
	if err != nil {
		return fmt.Errorf("encoding Calico's IPAM configuration: %w", err)
	}
	p := datastore.KVPair{Key: calicoConfigKey, Value: v}
	if _, err := a.kv.Update(ctx, p); errors.Is(err, datastore.ErrNotFound) {
		_, err = a.kv.Create(ctx, p)
		if err != nil {
			return fmt.Errorf("writing Calico's IPAM configuration %s: %w", calicoConfigKey, err)
		}
	} else if err != nil {
		return fmt.Errorf("writing Calico's IPAM configuration %s: %w", calicoConfigKey, err)
	}
	return nil
}
