package routes

import (
	"errors"
	"fmt"
	"syscall"

	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
)

// emptyWireguardTables keeps the route tables Calico's felix takes for
// WireGuard from routeTableRanges as Calico's felix keeps them while
// WireGuard is off (and Palisade has no WireGuard): no route in them, and
// no routing rule of wireguardRoutingRulePriority leading to them. A node
// that ran Calico with WireGuard on leaves both behind (the rule sends
// every unmarked packet to the table's wireguard.cali routes); every other
// table and rule is left alone.
func (m *Manager) emptyWireguardTables() error {
	var errs []error
	for _, t := range []struct {
		family, table int
	}{{netlink.FAMILY_V4, m.opts.WireguardTable4}, {netlink.FAMILY_V6, m.opts.WireguardTable6}} {
		if t.table == 0 {
			continue
		}
		rules, err := m.h.RuleList(t.family)
		if err != nil {
			if t.family == netlink.FAMILY_V6 && errors.Is(err, syscall.EAFNOSUPPORT) {
				continue // no IPv6 in this kernel
			}
			errs = append(errs, fmt.Errorf("listing routing rules: %w", err))
			continue
		}
		for _, r := range rules {
			if r.Table != t.table || r.Priority != m.opts.WireguardRulePriority {
				continue
			}
			rr := r
			if err := m.h.RuleDel(&rr); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing the routing rule of priority %d to table %d: %w", r.Priority, t.table, err))
				continue
			}
			m.log.WithFields(log.Fields{"priority": r.Priority, "table": t.table}).Info("Removed a WireGuard routing rule (routeTableRanges): Palisade has no WireGuard")
		}
		routes, err := m.h.RouteListFiltered(t.family, &netlink.Route{Table: t.table}, netlink.RT_FILTER_TABLE)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing routes of table %d: %w", t.table, err))
			continue
		}
		if len(routes) == 0 {
			continue
		}
		for _, r := range routes {
			rr := r
			if err := m.h.RouteDel(&rr); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("removing a route of table %d: %w", t.table, err))
			}
		}
		m.log.WithFields(log.Fields{"table": t.table, "routes": len(routes)}).Info("Emptied WireGuard's route table (routeTableRanges): Palisade has no WireGuard")
	}
	return errors.Join(errs...)
}
