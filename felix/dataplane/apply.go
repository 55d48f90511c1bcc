package dataplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/iptables"
	"github.com/palisade-net/palisade/felix/rules"
)

// slowApply is the apply time above which the phases are logged.
const slowApply = 30 * time.Millisecond

// setup resolves the backend and makes the table drivers of each family.
func (d *Driver) setup(ctx context.Context) error {
	b, err := iptables.DetectBackend(ctx, d.run, d.cfg.IptablesBackend)
	if err != nil {
		return err
	}
	d.backend = b
	versions := []int{4}
	if d.cfg.IPv6Support {
		if b.Available(6) {
			versions = append(versions, 6)
		} else {
			d.log.WithField("backend", b).Warn("IPv6 support is on but this backend has no ip6tables commands: IPv6 policy is not programmed")
		}
	}
	for _, v := range versions {
		f := &family{version: v, sets: d.sets[v/6], render: newRenderer(v)}
		for _, t := range rules.TableNames() {
			tbl := iptables.NewTable(t, v, b, d.run, d.log)
			tbl.SetMetrics(d.metrics)
			f.tables = append(f.tables, tbl)
		}
		d.families = append(d.families, f)
	}
	d.log.WithFields(log.Fields{"backend": b, "ipVersions": versions}).Info("iptables dataplane ready")
	return nil
}

// refresh marks what is due for a periodic read-back.
func (d *Driver) refresh(now time.Time) {
	due := func(last *time.Time, every time.Duration) bool {
		if every <= 0 || now.Sub(*last) < every {
			return false
		}
		*last = now
		return true
	}
	if due(&d.lastRefresh.iptables, d.cfg.IptablesRefreshInterval) {
		for _, f := range d.families {
			for _, t := range f.tables {
				t.Invalidate()
			}
		}
	}
	if due(&d.lastRefresh.ipsets, d.cfg.IpsetsRefreshInterval) {
		for _, f := range d.families {
			f.sets.Resync()
		}
	}
	if due(&d.lastRefresh.routes, d.cfg.RouteRefreshInterval) {
		d.routes.Resync()
		d.rpf.resync()
	}
	// interfaceRefreshInterval: this apply, like every apply, looks up
	// the interfaces of the host endpoints named by expectedIPs again
	// (unresolvedHosts); the interval only makes sure an apply runs.
	due(&d.lastRefresh.ifaces, d.cfg.InterfaceRefreshInterval)
}

// NextRefresh is how long until the next periodic read-back is due (a
// minute when none is configured).
func (d *Driver) NextRefresh(now time.Time) time.Duration {
	next := time.Minute
	if d.cfg == nil {
		return next
	}
	for _, x := range []struct {
		last  time.Time
		every time.Duration
	}{
		{d.lastRefresh.iptables, d.cfg.IptablesRefreshInterval},
		{d.lastRefresh.ipsets, d.cfg.IpsetsRefreshInterval},
		{d.lastRefresh.routes, d.cfg.RouteRefreshInterval},
		{d.lastRefresh.ifaces, d.cfg.InterfaceRefreshInterval},
	} {
		if x.every > 0 {
			if w := x.last.Add(x.every).Sub(now); w < next {
				next = w
			}
		}
	}
	return max(next, 0)
}

// Apply does the kernel work collected since the last Apply, in order: IP
// sets added or changed, iptables (every table of every family), routes,
// IP sets removed; then endpoint status. Nothing is written before the
// datastore is in sync. On error the parts that failed read the kernel
// back and are written again by the next Apply.
func (d *Driver) Apply(ctx context.Context) error {
	if !d.inSync || d.cfg == nil {
		return nil
	}
	// Once this apply's kernel work is done, the processes kept warm for
	// the next one start (not beside this one's work).
	defer d.run.WarmUp()
	if d.backend == "" {
		if err := d.setup(ctx); err != nil {
			return err
		}
		now := time.Now()
		d.lastRefresh.iptables, d.lastRefresh.ipsets, d.lastRefresh.routes, d.lastRefresh.ifaces = now, now, now, now
	}
	d.refresh(time.Now())
	start := time.Now()
	var tSets, tRender, tTables, tRoutes time.Duration
	defer func() {
		if total := time.Since(start); total > slowApply {
			d.log.WithFields(log.Fields{"total": total, "ipsets": tSets, "render": tRender, "iptables": tTables, "routes": tRoutes}).Debug("Slow dataplane apply")
		}
	}()

	for _, f := range d.families {
		if err := f.sets.ApplyUpdates(ctx); err != nil {
			return err
		}
	}
	tSets = time.Since(start)
	var errs []error
	if d.rulesDirty || d.unresolvedHosts() {
		eps, err := d.hosts.endpoints(d.endpoints)
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range d.families {
			rs := f.render.render(d.cfg, d.policies, d.profiles, eps)
			for _, t := range f.tables {
				t.SetChains(rs.Tables[t.Name])
				t.SetJumps(rs.Jumps, d.cfg.ChainInsertMode)
			}
		}
		d.rulesDirty = false
	}
	tRender = time.Since(start) - tSets
	// Routes are written before the tables, in this goroutine: a route to
	// an interface the dispatch does not know yet leads to a DROP (the
	// interface fails closed), so the order is safe, and a new pod's route
	// is then in place when its rules land. Written from a goroutine of
	// their own, they waited for a processor while this one was in the
	// kernel committing the tables: up to 5 ms behind them.
	t0 := time.Now()
	if err := d.routes.Apply(); err != nil {
		errs = append(errs, err)
	}
	tRoutes = time.Since(t0)
	rulesOK := true
	for _, f := range d.families {
		// One iptables-save for every table that must be read back.
		if slices.ContainsFunc(f.tables, (*iptables.Table).NeedsRead) {
			sections, err := iptables.ReadAll(ctx, d.run, d.backend, f.version)
			d.metrics.Save(err)
			if err == nil {
				for _, t := range f.tables {
					if t.NeedsRead() {
						t.Load(sections[t.Name])
					}
				}
			}
		}
		for _, t := range f.tables {
			if _, err := t.Apply(ctx); err != nil {
				errs = append(errs, err)
				rulesOK = false
			}
		}
	}
	tTables = time.Since(start) - tSets - tRender - tRoutes
	// rp_filter after the tables: the raw table's rpfilter rule already
	// drops spoofed packets of a new interface, so its sysctl (~40 µs in
	// the node namespace) need not delay the pod's first packet.
	if err := d.rpf.apply(d.run); err != nil {
		errs = append(errs, err)
	}
	if rulesOK {
		for _, f := range d.families {
			if err := f.sets.ApplyDeletions(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		errs = append(errs, d.reportStatus()...)
	}
	return errors.Join(errs...)
}

// unresolvedHosts reports whether a host endpoint is named by its
// expectedIPs only: its interface is looked up again at every apply (an
// address may have moved).
func (d *Driver) unresolvedHosts() bool {
	for id, ep := range d.endpoints {
		if id.Kind == calc.HostEndpoint && ep.InterfaceName == "" {
			return true
		}
	}
	return false
}

// reportStatus writes the status of endpoints programmed since the last
// report and removes that of endpoints gone.
func (d *Driver) reportStatus() []error {
	var errs []error
	for id := range d.epRemoved {
		if err := d.status.removed(id); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(d.epRemoved, id)
	}
	for id := range d.epDirty {
		if ep := d.endpoints[id]; ep != nil {
			if err := d.status.programmed(ep); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		delete(d.epDirty, id)
	}
	if !d.swept && d.status.dir != "" {
		d.swept = true
		entries, err := os.ReadDir(d.status.dir)
		if err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("endpoint status directory: %w", err))
		}
		known := map[string]bool{}
		for id := range d.endpoints {
			if id.Kind == calc.WorkloadEndpoint {
				known[StatusFileName(id.Namespace, id.Name)] = true
			}
		}
		for _, e := range entries {
			if !known[e.Name()] || strings.HasSuffix(e.Name(), ".tmp") {
				_ = os.Remove(d.status.dir + "/" + e.Name())
			}
		}
	}
	return errs
}
