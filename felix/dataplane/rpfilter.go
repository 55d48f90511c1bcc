package dataplane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// rpFilter keeps net.ipv4.conf.<iface>.rp_filter of each workload
// interface at 1, strict reverse-path filtering, as Calico: the kernel
// drops a packet whose source would not be routed back out of the
// interface it came in by, so a workload cannot send from an address that
// is not its own. A workload with IPv4 allowSpoofedSourcePrefixes gets 0,
// and the raw table's rpfilter rule and cali-rpf-skip do the same check
// with its prefixes let through. (IPv6 has no such sysctl; the raw rule
// covers it.)
type rpFilter struct {
	ifaces map[calc.EndpointID]string
	want   map[string]string // interface → value
	// dirty are the interfaces to write at the next apply.
	dirty map[string]struct{}
}

func newRPFilter() *rpFilter {
	return &rpFilter{ifaces: map[calc.EndpointID]string{}, want: map[string]string{}, dirty: map[string]struct{}{}}
}

// update follows a workload endpoint (nil: removed).
func (f *rpFilter) update(id calc.EndpointID, ep *calc.Endpoint) {
	if id.Kind != calc.WorkloadEndpoint {
		return
	}
	if old, ok := f.ifaces[id]; ok && (ep == nil || old != ep.InterfaceName) {
		delete(f.ifaces, id)
		delete(f.want, old)
		delete(f.dirty, old)
	}
	if ep == nil || !validIfaceName(ep.InterfaceName) {
		return
	}
	v := "1"
	for _, p := range ep.AllowSpoofedSourcePrefixes {
		if p.Addr().Is4() {
			v = "0"
		}
	}
	f.ifaces[id] = ep.InterfaceName
	if old, ok := f.want[ep.InterfaceName]; !ok || old != v {
		f.want[ep.InterfaceName] = v
		f.dirty[ep.InterfaceName] = struct{}{}
	}
}

// resync makes the next apply write every interface again (a veth made
// again under the same name starts from the kernel's default).
func (f *rpFilter) resync() {
	for iface := range f.want {
		f.dirty[iface] = struct{}{}
	}
}

// pending is the number of interfaces not written yet (missing ones wait).
func (f *rpFilter) pending() int { return len(f.dirty) }

// apply writes what changed in the node's namespace; an interface that
// does not exist yet stays pending.
func (f *rpFilter) apply(run *nsexec.Runner) error {
	if f.pending() == 0 {
		return nil
	}
	return run.Do(func() error {
		var errs []error
		for iface := range f.dirty {
			err := os.WriteFile("/proc/sys/net/ipv4/conf/"+iface+"/rp_filter", []byte(f.want[iface]), 0o644)
			switch {
			case err == nil:
				delete(f.dirty, iface)
			case errors.Is(err, fs.ErrNotExist):
			default:
				errs = append(errs, fmt.Errorf("rp_filter of %s: %w", iface, err))
			}
		}
		return errors.Join(errs...)
	})
}

// validIfaceName reports whether a name can be an interface's, and so a
// path element under /proc/sys.
func validIfaceName(s string) bool {
	return s != "" && len(s) <= 15 && s != "." && s != ".." && !strings.ContainsAny(s, "/ \x00")
}
