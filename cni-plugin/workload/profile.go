package workload

import (
	"context"
	"errors"
	"fmt"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// NetworkProfile is the profile Calico's plugin creates for a network when
// no policy type is configured: egress allowed; ingress allowed from
// anywhere for Kubernetes pods, otherwise only from endpoints of the same
// network (which carry the label named after it).
func NetworkProfile(network string, kubernetes bool) *v3.Profile {
	ingress := v3.Rule{Action: v3.Allow}
	if !kubernetes {
		ingress.Source.Selector = fmt.Sprintf("has(%s)", network)
	}
	return &v3.Profile{
		TypeMeta:   v3.TypeMeta{Kind: v3.KindProfile, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: network},
		Spec: v3.ProfileSpec{
			Ingress:       []v3.Rule{ingress},
			Egress:        []v3.Rule{{Action: v3.Allow}},
			LabelsToApply: map[string]string{network: ""},
		},
	}
}

// EnsureProfile creates p unless a profile of that name exists; an
// existing profile is never changed. It reports whether it created one.
func EnsureProfile(ctx context.Context, store datastore.Interface, p *v3.Profile) (bool, error) {
	key := datastore.Key{Kind: v3.KindProfile, Name: p.Name}
	if _, err := store.Get(ctx, key); err == nil {
		return false, nil
	} else if !errors.Is(err, datastore.ErrNotFound) {
		return false, fmt.Errorf("reading %s: %w", key, err)
	}
	v3.Default(p)
	if err := v3.Validate(p); err != nil {
		return false, err
	}
	if _, err := store.Create(ctx, p); err != nil {
		if errors.Is(err, datastore.ErrAlreadyExists) {
			return false, nil // another ADD won the race
		}
		return false, fmt.Errorf("creating %s: %w", key, err)
	}
	return true, nil
}
