package commands

import (
	"context"
	"fmt"
	"io"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
)

// targetForm is how a command that takes "-f FILENAME or KIND NAME..."
// words its usage errors, and how it prefixes the errors of settling
// namespaces.
type targetForm struct {
	// byName is the KIND form, as in "give either -f FILENAME or KIND NAME..., not both".
	byName string
	// minArgs is how many arguments the KIND form needs at least; tooFew
	// is the error when there are fewer.
	minArgs int
	tooFew  string
	// fileNSFailed prefixes a namespace error on resources read from files.
	fileNSFailed string
	// namedFailed prefixes an error building named resources; "" leaves it bare.
	namedFailed string
}

// loadTargets returns what a command acts on: the resources the -f option
// names (with the namespace flags applied), or, without -f, empty
// resources of the kind args[0] carrying the names after it. info is the
// kind's, and zero when the resources came from files.
func loadTargets(in io.Reader, files *fileOptions, ns *nsOptions, args []string, form targetForm) (info v3.KindInfo, rs []v3.Resource, err error) {
	switch {
	case files.filename != "" && len(args) > 0:
		return info, nil, fmt.Errorf("give either -f FILENAME or %s, not both", form.byName)
	case files.filename != "":
		loaded, err := files.load(in)
		if err != nil {
			return info, nil, fmt.Errorf("Failed to execute command: %w", err)
		}
		if err := ns.applyAll(loaded); err != nil {
			return info, nil, fmt.Errorf("%s: %w", form.fileNSFailed, err)
		}
		return info, loaded, nil
	case len(args) < form.minArgs:
		return info, nil, fmt.Errorf("%s", form.tooFew)
	}
	if info, err = kindArg(args[0]); err != nil {
		return info, nil, err
	}
	if rs, err = namedResources(info, args[1:], ns); err != nil && form.namedFailed != "" {
		err = fmt.Errorf("%s: %w", form.namedFailed, err)
	}
	return info, rs, err
}

// fetched is a resource read for a command that changes it, with the
// client to write it back through (close it when done).
type fetched struct {
	info  v3.KindInfo
	c     *client.Client
	close func()
	r     v3.Resource
}

// fetchNamed resolves KIND NAME, connects and reads the resource;
// getFailed words the error of a failed read.
func (a *app) fetchNamed(ctx context.Context, kind, name string, ns *nsOptions, getFailed func(v3.KindInfo, error) error) (*fetched, error) {
	info, err := kindArg(kind)
	if err != nil {
		return nil, err
	}
	named, err := namedResources(info, []string{name}, ns)
	if err != nil {
		return nil, err
	}
	c, closeFn, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	r, err := c.Get(ctx, keyOf(named[0]))
	if err != nil {
		closeFn()
		return nil, getFailed(info, err)
	}
	return &fetched{info: info, c: c, close: closeFn, r: r}, nil
}
