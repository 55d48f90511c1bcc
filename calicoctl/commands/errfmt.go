package commands

import (
	"errors"
	"fmt"
	"strings"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// identifier names a resource the way Calico's errors do: Kind(name) or
// Kind(namespace/name).
func identifier(k datastore.Key) string {
	if k.Namespace != "" {
		return fmt.Sprintf("%s(%s/%s)", k.Kind, k.Namespace, k.Name)
	}
	return fmt.Sprintf("%s(%s)", k.Kind, k.Name)
}

// describe renders an error from the client as Calico phrases it.
func describe(err error) string {
	var nf *datastore.NotFoundError
	var ae *datastore.AlreadyExistsError
	var ce *datastore.ConflictError
	switch {
	case errors.As(err, &nf) && nf.Key.Kind != "":
		return fmt.Sprintf("resource does not exist: %s with error: %v", identifier(nf.Key), err)
	case errors.As(err, &ae) && ae.Key.Kind != "":
		return fmt.Sprintf("resource already exists: %s", identifier(ae.Key))
	case errors.As(err, &ce) && ce.Key.Kind != "":
		return fmt.Sprintf("update conflict: %s with error: resource version %s is out of date (latest: %s); update the resource YAML/JSON in order to make changes",
			identifier(ce.Key), ce.Revision, ce.Current)
	}
	return err.Error()
}

// describeAll renders several errors as Calico lists them: [e1; e2].
func describeAll(errs []error) string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = describe(e)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// keyOf is the datastore key of a resource.
func keyOf(r v3.Resource) datastore.Key { return datastore.KeyOf(r) }
