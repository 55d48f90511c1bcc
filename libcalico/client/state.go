package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// state is what a batch knows of the stored resources it touches: for
// kinds read whole, every resource of the kind; for the others, the
// resources the batch names. It is updated as each checked resource is
// accepted, so later resources of the batch are checked against earlier
// ones.
type state struct {
	// known maps a resource path to the stored (or accepted) resource;
	// a path mapped to nil is known to be absent.
	known map[string]v3.Resource
	// whole lists, per kind read whole, the paths of that kind.
	whole map[string]map[string]v3.Resource
	// bad holds the paths whose stored value is not a valid resource,
	// with its revision: a create there fails, an update or apply
	// replaces it.
	bad map[string]string
}

// loadState reads what the checks of a batch need: the whole kind when it
// has cross-resource rules or the batch has many of it, otherwise each
// named resource.
func (c *Client) loadState(ctx context.Context, perKind map[string]int, prepared []v3.Resource) (*state, error) {
	st := &state{known: map[string]v3.Resource{}, whole: map[string]map[string]v3.Resource{}, bad: map[string]string{}}
	for kind, n := range perKind {
		if n < listThreshold && !hasCrossRules(kind) {
			continue
		}
		items, bad, _, err := c.ListWithBadValues(ctx, datastore.ListOptions{Kind: kind})
		if err != nil {
			return nil, fmt.Errorf("reading the stored %s resources: %w", kind, err)
		}
		for _, bv := range bad {
			st.bad[bv.Path] = strconv.FormatInt(bv.Revision, 10)
		}
		all := map[string]v3.Resource{}
		for _, it := range items {
			path, err := datastore.KeyPath(datastore.KeyOf(it))
			if err != nil {
				return nil, err
			}
			all[path] = it
		}
		st.whole[kind] = all
	}
	var refs []datastore.Key
	for _, r := range prepared {
		if r == nil {
			continue
		}
		if tk, ok := neededTier(r); ok {
			refs = append(refs, tk)
		}
		refs = append(refs, neededFilters(r)...)
		kind := r.GetTypeMeta().Kind
		k := datastore.KeyOf(r)
		path, err := datastore.KeyPath(k)
		if err != nil {
			return nil, err
		}
		if all, ok := st.whole[kind]; ok {
			st.known[path] = all[path]
			continue
		}
		if _, seen := st.known[path]; seen {
			continue
		}
		got, err := c.store.Get(ctx, k)
		var bv *datastore.BadValueError
		switch {
		case errors.Is(err, datastore.ErrNotFound):
			st.known[path] = nil
		case errors.As(err, &bv):
			st.known[path] = nil
			st.bad[path] = strconv.FormatInt(bv.Revision, 10)
		case err != nil:
			return nil, fmt.Errorf("reading %s: %w", k, err)
		default:
			st.known[path] = got
		}
	}
	// The tiers policies are created in, unless the batch read them already.
	for _, k := range refs {
		path, err := datastore.KeyPath(k)
		if err != nil {
			return nil, err
		}
		if _, seen := st.known[path]; seen {
			continue
		}
		if all, ok := st.whole[k.Kind]; ok {
			st.known[path] = all[path]
			continue
		}
		got, err := c.store.Get(ctx, k)
		switch {
		case errors.Is(err, datastore.ErrNotFound):
			st.known[path] = nil
		case err != nil:
			return nil, fmt.Errorf("reading %s: %w", k, err)
		default:
			st.known[path] = got
		}
	}
	return st, nil
}

// check decides how to write r (the index-th resource of the batch) under
// op, runs the rules against the known state and records r as accepted.
func (st *state) check(op Op, index int, r v3.Resource) (pending, error) {
	k := datastore.KeyOf(r)
	path, err := datastore.KeyPath(k)
	if err != nil {
		return pending{}, err
	}
	existing := st.known[path]
	badRev, bad := st.bad[path]
	p := pending{index: index, r: r, path: path, exists: existing != nil || bad}
	m := r.GetObjectMeta()
	switch {
	case op == OpCreate && existing != nil:
		return p, &datastore.AlreadyExistsError{Key: k, Revision: existing.GetObjectMeta().ResourceVersion}
	case op == OpCreate && bad:
		return p, &datastore.AlreadyExistsError{Key: k, Revision: badRev}
	case op == OpUpdate && !p.exists:
		return p, &datastore.NotFoundError{Key: k}
	}
	if bad && existing == nil {
		// A value that is not a valid resource is replaced whole, as
		// long as it is still the one read.
		delete(st.bad, path)
		if m.ResourceVersion == "" {
			m.ResourceVersion = badRev
			p.autoRev = true
		}
		m.UID, m.CreationTimestamp = "", v3.Time{}
		st.known[path] = r
		if all, ok := st.whole[k.Kind]; ok {
			all[path] = r
		}
		return p, nil
	}
	if existing != nil {
		if err := checkImmutable(existing, r); err != nil {
			return p, err
		}
		em := existing.GetObjectMeta()
		if m.ResourceVersion == "" {
			m.ResourceVersion = em.ResourceVersion
			p.autoRev = true
		}
		// The stored identity is kept whatever the input says.
		m.UID, m.CreationTimestamp = em.UID, em.CreationTimestamp
	} else {
		m.ResourceVersion = ""
	}
	if hasCrossRules(k.Kind) {
		if err := checkCross(r, st.whole[k.Kind], path); err != nil {
			return p, err
		}
	}
	// A policy is created (and, as Calico's apply creates first, applied)
	// only in a tier that exists, stored or earlier in the batch. Calico
	// does not check an update.
	if tk, ok := neededTier(r); ok && op != OpUpdate {
		tpath, err := datastore.KeyPath(tk)
		if err != nil {
			return p, err
		}
		if st.known[tpath] == nil {
			return p, missingTier(k, tk)
		}
	}
	for _, fk := range neededFilters(r) {
		fpath, err := datastore.KeyPath(fk)
		if err != nil {
			return p, err
		}
		if st.known[fpath] == nil {
			return p, missingFilter(k, fk)
		}
	}
	st.known[path] = r
	if all, ok := st.whole[k.Kind]; ok {
		all[path] = r
	}
	return p, nil
}
