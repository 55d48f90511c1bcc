package commands

import (
	"fmt"
	"io"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// outcome counts what a resource-management command did.
type outcome struct {
	// total is the number of resources the command was given.
	total int
	// handled is the number written (or skipped as asked).
	handled int
	// errs are the errors of the resources that failed, in order.
	errs []error
	// kind is the one kind of every resource, or "" for mixed kinds.
	kind string
}

// singleKind returns the kind shared by every resource, or "".
func singleKind(rs []v3.Resource) string {
	kind := ""
	for i, r := range rs {
		k := r.GetTypeMeta().Kind
		if i > 0 && k != kind {
			return ""
		}
		kind = k
	}
	return kind
}

// report prints the result of a create, apply or replace the way Calico
// does and returns the error to exit with. verb is "create", "apply" or
// "replace"; done its past tense.
func (o outcome) report(out io.Writer, verb, done string) error {
	what := func(plural string) string {
		if o.kind != "" {
			return fmt.Sprintf("'%s' %s", o.kind, plural)
		}
		return plural
	}
	switch {
	case o.total == 0:
		fmt.Fprintln(out, "No resources specified")
		return nil
	case o.handled == 0 && o.total == 1:
		return fmt.Errorf("Failed to %s %s: %s", verb, what("resource"), describeAll(o.errs))
	case o.handled == 0:
		return fmt.Errorf("Failed to %s any %s: %s", verb, what("resources"), describeAll(o.errs))
	case len(o.errs) == 0:
		fmt.Fprintf(out, "Successfully %s %d %s\n", done, o.handled, what("resource(s)"))
		return nil
	}
	fmt.Fprintf(out, "Partial success: %s the first %d out of %d %s:\n", done, o.handled, o.total, what("resources"))
	return fmt.Errorf("Hit error(s): %s", describeAll(o.errs))
}
