package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// writeOptions are what create, apply and replace share.
type writeOptions struct {
	files      fileOptions
	ns         nsOptions
	skipExists bool
}

// write runs create, apply or replace: it decodes every document and
// checks every resource before writing the first, then writes them in
// order and reports as Calico does.
func (a *app) write(ctx context.Context, o *writeOptions, op client.Op, verb, done string) error {
	if o.files.filename == "" {
		return fmt.Errorf("a file is required: use -f FILE (or -f - for stdin)")
	}
	rs, err := o.files.load(a.env.In)
	if err != nil {
		return fmt.Errorf("Failed to execute command: %w", err)
	}
	if len(rs) == 0 {
		return outcome{}.report(a.env.Out, verb, done)
	}
	if err := o.ns.applyAll(rs); err != nil {
		return fmt.Errorf("Failed to execute command: %w", err)
	}
	for i, r := range rs {
		if err := writable(r); err != nil {
			return fmt.Errorf("Failed to execute command: document %d of %d (%s): %w; nothing was %s",
				i+1, len(rs), identifier(keyOf(r)), err, done)
		}
	}
	a.warnNotActedOn(rs)
	c, closeFn, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	prepared := make([]v3.Resource, len(rs))
	for i, r := range rs {
		if prepared[i], err = c.Prepare(r); err != nil {
			return fmt.Errorf("Failed to execute command: document %d of %d (%s): %s; nothing was %s",
				i+1, len(rs), identifier(keyOf(r)), describe(err), done)
		}
	}
	res := c.WritePrepared(ctx, op, prepared)
	out := outcome{total: len(rs), kind: singleKind(rs)}
	for _, r := range res {
		switch {
		case r.Err == nil:
			out.handled++
		case o.skipExists && errors.Is(r.Err, datastore.ErrAlreadyExists):
			out.handled++
		default:
			out.errs = append(out.errs, r.Err)
		}
	}
	return out.report(a.env.Out, verb, done)
}

// kindArg resolves a kind the user typed to a stored kind.
func kindArg(name string) (v3.KindInfo, error) {
	info, err := v3.LookupKind(name)
	if err != nil || !info.Stored {
		return v3.KindInfo{}, fmt.Errorf("resource type '%s' is not supported", name)
	}
	return info, nil
}

// namedResources builds empty resources of kind carrying just the names
// (and settled namespace) the user gave on the command line.
func namedResources(info v3.KindInfo, names []string, ns *nsOptions) ([]v3.Resource, error) {
	out := make([]v3.Resource, 0, len(names))
	for _, n := range names {
		if n == "" {
			return nil, fmt.Errorf("resource name may not be empty")
		}
		r := info.New()
		r.GetObjectMeta().Name = n
		if err := ns.apply(r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// writable refuses what Calico's calicoctl refuses to write: the read-only
// ClusterInformation, and NetworkPolicies named like the ones Kubernetes
// NetworkPolicies become (those are managed through the Kubernetes API).
func writable(r v3.Resource) error {
	kind, name := r.GetTypeMeta().Kind, r.GetObjectMeta().Name
	switch {
	case kind == v3.KindClusterInformation:
		return fmt.Errorf("resource type '%s' is read-only", kind)
	case kind == v3.KindNetworkPolicy && strings.HasPrefix(name, "knp.default."):
		return fmt.Errorf("operation %s is not supported on NetworkPolicy(%s/%s): kubernetes network policies must be managed through the kubernetes API",
			"create or apply", r.GetObjectMeta().Namespace, name)
	}
	return nil
}

// warnNotActedOn says once on stderr, per kind and field, which fields of
// rs Palisade accepts but does not act on yet (the v3.NotActedOn table).
func (a *app) warnNotActedOn(rs []v3.Resource) {
	seen := map[string]bool{}
	for _, r := range rs {
		kind := r.GetTypeMeta().Kind
		for _, f := range v3.NotActedOnFields(r) {
			if key := kind + " " + f; !seen[key] {
				seen[key] = true
				fmt.Fprintf(a.env.ErrOut, "Warning: %s field %s is accepted but not acted on by Palisade (see docs/not-acted-on.md)\n", kind, f)
			}
		}
		if p, ok := r.(*v3.IPPool); ok {
			if mode := ipipMode(p.Spec); mode != v3.EncapNever {
				fmt.Fprintf(a.env.ErrOut, "Warning: IPPool %q spec.ipipMode %s is not acted on: Palisade builds no IP-in-IP tunnels, the pool is routed without encapsulation (use vxlanMode; see docs/vxlan.md)\n", p.Name, mode)
			}
		}
	}
}

// ipipMode is the IP-in-IP mode a pool asks for, from ipipMode or the
// deprecated ipip block, as defaulting reads them.
func ipipMode(s v3.IPPoolSpec) v3.EncapMode {
	switch {
	case s.IPIPMode != "":
		return s.IPIPMode
	case s.IPIP == nil || !s.IPIP.Enabled:
		return v3.EncapNever
	case s.IPIP.Mode != "":
		return s.IPIP.Mode
	}
	return v3.EncapAlways
}
