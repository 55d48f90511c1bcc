package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/node/status"
)

// How the agent checks that the datastore answers: one read a second,
// each given healthTimeout before it counts as unanswered (a frozen etcd
// or lost packets fail no faster).
const (
	healthInterval = time.Second
	healthTimeout  = 3 * time.Second
)

// health follows whether the datastore answers. It logs the loss once, at
// warning level, and the return once; its state goes into the status
// report. The watchers themselves reconnect on their own and stay quiet.
type health struct {
	log *log.Entry
	mu  sync.Mutex
	st  status.DatastoreStatus
}

// newHealth starts from a datastore that just answered (the agent has
// connected) at now.
func newHealth(logger *log.Entry, endpoints []string, now time.Time) *health {
	return &health{log: logger, st: status.DatastoreStatus{
		Endpoints: append([]string(nil), endpoints...), Reachable: true, Since: now,
	}}
}

// observe records one probe's outcome at now, logging a change.
func (h *health) observe(err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if (err == nil) == h.st.Reachable {
		if err != nil {
			h.st.Error = err.Error()
		}
		return
	}
	fields := log.Fields{"endpoints": h.st.Endpoints}
	if err != nil {
		h.st = status.DatastoreStatus{Endpoints: h.st.Endpoints, Since: now, Error: err.Error()}
		h.log.WithFields(fields).WithError(err).Warn("Datastore unreachable: forwarding and policy stay as they are; changes wait until it answers again")
		return
	}
	fields["unreachableFor"] = now.Sub(h.st.Since).Round(time.Millisecond).String()
	h.st = status.DatastoreStatus{Endpoints: h.st.Endpoints, Reachable: true, Since: now}
	h.log.WithFields(fields).Info("Datastore reachable again")
}

// err is nil while the datastore answers, else why not (for felix's
// readiness).
func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.st.Reachable {
		return nil
	}
	if h.st.Error != "" {
		return errors.New(h.st.Error)
	}
	return errors.New("unreachable")
}

// status is the current state, for the status report.
func (h *health) status() *status.DatastoreStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.st
	st.Endpoints = append([]string(nil), h.st.Endpoints...)
	return &st
}

// run probes every healthInterval until ctx ends.
func (h *health) run(ctx context.Context, probe func(context.Context) error) {
	tick := time.NewTicker(healthInterval)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, healthTimeout)
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.observe(err, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// kvProbe reads ClusterInformation "default" raw (so an undecodable value
// still proves etcd answers); absent, or not readable by our user, is an
// answer too.
func kvProbe(kv datastore.KV) func(context.Context) error {
	key, err := datastore.KeyPath(datastore.Key{Kind: v3.KindClusterInformation, Name: "default"})
	return func(ctx context.Context) error {
		if err != nil {
			return err
		}
		_, gerr := kv.Get(ctx, key)
		if gerr == nil || errors.Is(gerr, datastore.ErrNotFound) || errors.Is(gerr, rpctypes.ErrPermissionDenied) {
			return nil
		}
		return gerr
	}
}
