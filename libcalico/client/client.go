package client

import (
	"context"
	"fmt"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// DefaultNamespace is the namespace given to namespaced resources that
// name none, as Calico does.
const DefaultNamespace = "default"

// Client reads and writes resources through a datastore, checking every
// write first. It holds no state of its own and is safe for concurrent use
// when the datastore is.
type Client struct {
	store datastore.Interface
}

// New returns a client over store. The client does not own store: closing
// it is the caller's job.
func New(store datastore.Interface) *Client {
	return &Client{store: store}
}

// Store returns the datastore the client writes to.
func (c *Client) Store() datastore.Interface { return c.store }

// Get reads one resource. An empty namespace of a namespaced kind is read
// as "default".
func (c *Client) Get(ctx context.Context, k datastore.Key) (v3.Resource, error) {
	k, err := scopeKey(k)
	if err != nil {
		return nil, err
	}
	return c.store.Get(ctx, k)
}

// List reads the resources opts selects (an empty namespace of a
// namespaced kind selects every namespace) and the revision the list is
// consistent at.
func (c *Client) List(ctx context.Context, opts datastore.ListOptions) ([]v3.Resource, string, error) {
	if opts.Kind != "" {
		info, err := kindInfo(opts.Kind)
		if err != nil {
			return nil, "", err
		}
		if !info.Namespaced && opts.Namespace != "" {
			return nil, "", ruleErrorf(ErrScope, "namespace %q given, but %s is not namespaced", opts.Namespace, info.Kind)
		}
		opts.Kind = info.Kind
	}
	return c.store.List(ctx, opts)
}

// ListWithBadValues is List that also returns the stored values that are
// not valid resources, which List skips. A store that cannot say returns
// none.
func (c *Client) ListWithBadValues(ctx context.Context, opts datastore.ListOptions) ([]v3.Resource, []*datastore.BadValueError, string, error) {
	l, ok := c.store.(datastore.BadValueLister)
	if !ok {
		items, rev, err := c.List(ctx, opts)
		return items, nil, rev, err
	}
	if opts.Kind != "" {
		info, err := kindInfo(opts.Kind)
		if err != nil {
			return nil, nil, "", err
		}
		if !info.Namespaced && opts.Namespace != "" {
			return nil, nil, "", ruleErrorf(ErrScope, "namespace %q given, but %s is not namespaced", opts.Namespace, info.Kind)
		}
		opts.Kind = info.Kind
	}
	return l.ListWithBadValues(ctx, opts)
}

// Delete removes a resource and returns its last state. A non-empty
// resourceVersion must match the stored one. The default, kube-admin and
// kube-baseline tiers, and tiers that policies still belong to, are not
// deleted (ErrNotSupported), as in Calico.
func (c *Client) Delete(ctx context.Context, k datastore.Key, resourceVersion string) (v3.Resource, error) {
	k, err := scopeKey(k)
	if err != nil {
		return nil, err
	}
	if k.Kind == v3.KindTier {
		if err := c.checkTierDelete(ctx, k.Name); err != nil {
			return nil, err
		}
	}
	return c.store.Delete(ctx, k, resourceVersion)
}

// kindInfo finds a stored kind by canonical name.
func kindInfo(kind string) (v3.KindInfo, error) {
	info, ok := v3.KindByName(kind)
	if !ok {
		return v3.KindInfo{}, fmt.Errorf("kind %q is not a known resource kind", kind)
	}
	if !info.Stored {
		return v3.KindInfo{}, fmt.Errorf("kind %s is not stored in the datastore", kind)
	}
	return info, nil
}

// scopeKey checks a key's namespace against its kind's scope and fills the
// default namespace.
func scopeKey(k datastore.Key) (datastore.Key, error) {
	info, err := kindInfo(k.Kind)
	if err != nil {
		return k, err
	}
	if k.Name == "" {
		return k, fmt.Errorf("%s: a name is required", info.Kind)
	}
	if !info.Namespaced {
		if k.Namespace != "" {
			return k, ruleErrorf(ErrScope, "%s %q: namespace %q given, but %s is not namespaced", info.Kind, k.Name, k.Namespace, info.Kind)
		}
		return k, nil
	}
	if k.Namespace == "" {
		k.Namespace = DefaultNamespace
	}
	return k, nil
}
