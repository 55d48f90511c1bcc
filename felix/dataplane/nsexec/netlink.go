package nsexec

import "github.com/vishvananda/netlink"

// Netlink opens a netlink handle in the namespace (the caller's for a nil
// or zero Runner): its calls need no thread of Do. The caller closes it.
func (r *Runner) Netlink() (*netlink.Handle, error) {
	if ns := r.Handle(); ns >= 0 {
		return netlink.NewHandleAt(ns)
	}
	return netlink.NewHandle()
}
