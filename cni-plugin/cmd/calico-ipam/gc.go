package main

import (
	"fmt"
	"strings"

	"github.com/palisade-net/palisade/cni-plugin/session"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// collectGarbage is the GC of calico-ipam.
func collectGarbage(s *session.Session, alloc *ipam.Allocator) error {
	valid := map[string]bool{}
	for _, a := range s.Conf.ValidAttachments {
		valid[a.ContainerID] = true
	}
	prefix := s.Conf.Name + "."
	handles, err := alloc.ListHandles(s.Ctx)
	if err != nil {
		return session.Retryable(fmt.Errorf("listing handles: %w", err))
	}
	for _, h := range handles {
		id, ok := strings.CutPrefix(h.ID, prefix)
		if !ok || valid[id] {
			continue
		}
		ips, err := alloc.IPsByHandle(s.Ctx, h.ID)
		if err != nil {
			return session.Retryable(fmt.Errorf("reading handle %s: %w", h.ID, err))
		}
		// A handle of a stale attachment that holds no address (a count
		// an interrupted ADD left) is removed too.
		mine := true
		for _, ip := range ips {
			a, err := alloc.GetAssignmentAttributes(s.Ctx, ip)
			if err != nil || a.Attrs["node"] != s.Workload.Node || a.IsSticky() {
				mine = false
				break
			}
		}
		if !mine {
			continue
		}
		if err := alloc.ReleaseByHandle(s.Ctx, h.ID); err != nil {
			return session.Retryable(fmt.Errorf("releasing handle %s: %w", h.ID, err))
		}
		s.Log.WithField("handle", h.ID).WithField("addresses", ips).Info("Released addresses of a stale attachment")
	}
	return nil
}
