package bpf

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/cilium/ebpf"
	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/rules"
)

// lbMaps keeps the load balancer's maps (bpf/c/nat.h) equal to the calc's
// LoadBalancer and felix's settings: the frontends (pal_svc), their
// backends by index, all then this node's (pal_be), by address (pal_be_live),
// their Maglev tables (pal_maglev), the nodes (pal_nodes: the tunnel's
// peers), bpfDSROptoutCIDRs (pal_dsr_optout) and the node's settings
// (pal_natcfg: the tunnel device, bpfExternalServiceMode). It mirrors
// what the hash maps hold (have), read back in batches at start and at
// every refresh (a tampered map is repaired); each apply after a change
// compares the wanted entries of the frontends that changed with the
// mirror and writes the difference in batches: what frontends will name before the frontends, the
// frontends, then what nothing names any more, so a new flow always finds
// a backend its frontend has. The flows' translations (pal_nat) are the
// programs'; they are kept while their backend stays one of the
// frontend's.
type lbMaps struct {
	want *calc.LoadBalancer
	// settings are felix's configuration of the load balancer.
	settings lbSettings
	// tunnel is the node port tunnel device's interface index (0: none).
	tunnel int
	// floating: a workload of the node has a floating IP (the programs
	// look floating IPs up only then).
	floating bool
	dirty    bool
	// warned names the Services told about once (too many Maglev ones,
	// too many endpoints, SCTP).
	warned map[string]bool
	log    *log.Entry
	// have mirrors the hash maps (nil: read them back first); applied
	// are the frontends (and appliedMaglev those with a Maglev table)
	// have was last made equal to (nil: every entry is compared).
	have          *lbHave
	applied       map[calc.Frontend]calc.FrontendBackends
	appliedMaglev map[calc.Frontend]bool
	bufs          struct {
		svc    batchBuf[palbpf.ServiceKey, palbpf.ServiceValue]
		be     batchBuf[palbpf.BackendKey, palbpf.BackendValue]
		live   batchBuf[palbpf.BackendLiveKey, uint8]
		maglev batchBuf[palbpf.MaglevKey, palbpf.BackendValue]
		nodes  batchBuf[palbpf.NodeKey, uint8]
	}
}

// resync makes the next apply read the maps back and write them whole.
func (l *lbMaps) resync() {
	l.have, l.applied = nil, nil
	l.dirty = true
}

// lbSettings are the FelixConfiguration fields of the load balancer.
type lbSettings struct {
	// dsr is bpfExternalServiceMode DSR (Tunnel, the default: false).
	dsr    bool
	optout []netip.Prefix
	// maglevEndpoints and maglevServices are
	// bpfMaglevMaxEndpointsPerService and bpfMaglevMaxServices.
	maglevEndpoints, maglevServices int
}

// Calico's defaults of bpfMaglevMaxEndpointsPerService and
// bpfMaglevMaxServices.
const (
	defaultMaglevEndpoints = 100
	defaultMaglevServices  = 100
)

// lbSettingsOf reads the load balancer's settings; bad values are named
// in the log and the defaults used.
func lbSettingsOf(cfg *calc.Config, logger *log.Entry) lbSettings {
	s := lbSettings{maglevEndpoints: defaultMaglevEndpoints, maglevServices: defaultMaglevServices}
	switch m := cfg.Spec.BPFExternalServiceMode; m {
	case "", "Tunnel":
	case "DSR":
		s.dsr = true
	default:
		logger.WithField("bpfExternalServiceMode", m).Warn("Neither Tunnel nor DSR: using Tunnel")
	}
	if c := cfg.Spec.BPFDSROptoutCIDRs; c != nil {
		for _, a := range *c {
			p, err := calc.ParseNet(a)
			if err != nil {
				logger.WithField("bpfDSROptoutCIDRs", a).Warn("Not a CIDR: left out")
				continue
			}
			s.optout = append(s.optout, p.Masked())
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{{"bpfMaglevMaxEndpointsPerService", cfg.Spec.BPFMaglevMaxEndpointsPerService, &s.maglevEndpoints},
		{"bpfMaglevMaxServices", cfg.Spec.BPFMaglevMaxServices, &s.maglevServices}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 || *f.v > 3000 {
			logger.WithField(f.name, *f.v).Warn("Outside 1 to 3000: using the default")
			continue
		}
		*f.dst = *f.v
	}
	return s
}

// maglevSize is the size of a Maglev table: the first prime at least 100
// times the endpoints a table holds, so that a backend's share of the
// slots differs from another's by at most about 1%.
func maglevSize(endpoints int) int {
	n := 100 * endpoints
	for !isPrime(n) {
		n++
	}
	return n
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// maglevEntries is the Maglev map's size for the settings.
func (s lbSettings) maglevEntries() int { return s.maglevServices * maglevSize(s.maglevEndpoints) }

// OnLoadBalancerUpdate implements calc.ServiceDataplane.
func (d *Driver) OnLoadBalancerUpdate(lb *calc.LoadBalancer) {
	d.lb.want = lb
	d.lb.dirty = true
}

var lbProtos = map[string]uint8{"tcp": 6, "udp": 17}

// frontendID is a frontend's id in the maps: the first bytes of the
// SHA-256 of what it is, the same in every felix (a restarted one finds
// its backends).
func frontendID(f calc.Frontend) uint32 {
	return hash32(f.Proto + "/" + f.Addr.String() + "/" + strconv.Itoa(int(f.Port)))
}

func hash32(s string) uint32 {
	sum := sha256.Sum256([]byte(s))
	return binary.BigEndian.Uint32(sum[:4])
}

// lbHave is the hash maps' content, wanted or held (a set's value is 1).
type lbHave struct {
	svc    map[palbpf.ServiceKey]palbpf.ServiceValue
	be     map[palbpf.BackendKey]palbpf.BackendValue
	live   map[palbpf.BackendLiveKey]uint8
	maglev map[palbpf.MaglevKey]palbpf.BackendValue
	nodes  map[palbpf.NodeKey]uint8
}

func newLBHave() *lbHave {
	return &lbHave{svc: map[palbpf.ServiceKey]palbpf.ServiceValue{}, be: map[palbpf.BackendKey]palbpf.BackendValue{},
		live: map[palbpf.BackendLiveKey]uint8{}, maglev: map[palbpf.MaglevKey]palbpf.BackendValue{},
		nodes: map[palbpf.NodeKey]uint8{}}
}

// lbWant is the maps' wanted content.
type lbWant struct {
	lbHave
	optout map[palbpf.DSRKey]struct{}
	cfg    palbpf.NATConfig
	// nodePorts has a bit set for each node port.
	nodePorts palbpf.NodePorts
}

func backendValue(b calc.Backend) palbpf.BackendValue {
	v := palbpf.BackendValue{Addr: palbpf.Addr16(b.Addr()), Port: b.Port()}
	if b.Local {
		v.Local = 1
	}
	if b.Node.IsValid() {
		v.Node = palbpf.Addr16(b.Node)
	}
	return v
}

func (l *lbMaps) warnOnce(key string, fields log.Fields, msg string) {
	if l.warned == nil {
		l.warned = map[string]bool{}
	}
	if l.warned[key] {
		return
	}
	l.warned[key] = true
	if l.log != nil {
		l.log.WithFields(fields).Warn(msg)
	}
}

// wanted is what the maps want besides the frontends' entries: the
// settings, the nodes and the node ports' bits.
func (l *lbMaps) wanted() lbWant {
	w := lbWant{lbHave: lbHave{nodes: map[palbpf.NodeKey]uint8{}}, optout: map[palbpf.DSRKey]struct{}{}}
	w.cfg.TunIfindex = uint32(l.tunnel)
	if l.settings.dsr {
		w.cfg.Flags |= palbpf.NATConfigDSR
	}
	for _, p := range l.settings.optout {
		w.optout[palbpf.DSRKey{Prefixlen: uint32(palbpf.PrefixLen16(p)), Addr: palbpf.Addr16(p.Addr())}] = struct{}{}
	}
	if l.want == nil {
		return w
	}
	for _, a := range l.want.Nodes {
		w.nodes[palbpf.NodeKey{A: palbpf.Addr16(a)}] = 1
	}
	for f, fb := range l.want.Frontends {
		if _, ok := lbProtos[f.Proto]; ok && fb.Kind == calc.FrontendNodePort {
			w.nodePorts.Bits[f.Port>>6] |= 1 << (f.Port & 63)
		}
	}
	return w
}

// maglevFrontends are the frontends that get a Maglev table: the first
// bpfMaglevMaxServices that ask for one, in a stable order.
func (l *lbMaps) maglevFrontends() map[calc.Frontend]bool {
	ask := map[calc.Frontend]calc.FrontendBackends{}
	for f, fb := range l.want.Frontends {
		if _, ok := lbProtos[f.Proto]; ok && fb.Maglev && fb.Kind == calc.FrontendExternal && len(fb.Backends) > 0 {
			ask[f] = fb
		}
	}
	out := map[calc.Frontend]bool{}
	for _, f := range sortedFrontends(ask) {
		if len(out) >= l.settings.maglevServices {
			l.warnOnce("maglev/"+ask[f].Service, log.Fields{"service": ask[f].Service, "bpfMaglevMaxServices": l.settings.maglevServices},
				"More Maglev Services than bpfMaglevMaxServices: this one's backends are chosen at random")
			continue
		}
		out[f] = true
	}
	return out
}

// sameFrontend: a and b give a frontend the same entries.
func sameFrontend(a, b calc.FrontendBackends) bool {
	return a.Service == b.Service && a.Group == b.Group && a.Kind == b.Kind && a.ExternalLocal == b.ExternalLocal &&
		a.InternalLocal == b.InternalLocal && a.AffinitySeconds == b.AffinitySeconds && a.Maglev == b.Maglev &&
		sameBackends(a.Backends, b.Backends) && sameBackends(a.LocalBackends, b.LocalBackends)
}

// sameBackends compares two backend lists; the calc keeps the lists of
// the Services that did not change, so most are the same slice, which
// needs no walk (an apply after one endpoint changed compared every
// frontend's backends, 50,000 of them with 5,000 Services).
func sameBackends(a, b []calc.Backend) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.Equal(a, b)
}

// addFrontend puts a frontend's entries in w (maglev: it has a table).
func (l *lbMaps) addFrontend(w *lbHave, f calc.Frontend, fb calc.FrontendBackends, maglev bool) {
	proto, ok := lbProtos[f.Proto]
	if !ok {
		l.warnOnce("sctp/"+fb.Service, log.Fields{"service": fb.Service}, "SCTP Service ports are not load-balanced by the eBPF dataplane")
		return
	}
	id := frontendID(f)
	v := palbpf.ServiceValue{Id: id, Count: uint32(len(fb.Backends)), Local: uint32(len(fb.LocalBackends))}
	switch fb.Kind {
	case calc.FrontendExternal:
		v.Flags |= palbpf.ServiceExternal
	case calc.FrontendNodePort:
		v.Flags |= palbpf.ServiceNodePort
	}
	if fb.ExternalLocal {
		v.Flags |= palbpf.ServiceExternalLocal
	}
	if fb.InternalLocal {
		v.Flags |= palbpf.ServiceInternalLocal
	}
	if fb.AffinitySeconds > 0 {
		v.AffId, v.AffSecs = hash32(fb.Group), fb.AffinitySeconds
	}
	for i, b := range fb.Backends {
		w.be[palbpf.BackendKey{Id: id, Idx: uint32(i)}] = backendValue(b)
		w.live[palbpf.BackendLiveKey{Id: id, Port: b.Port(), Addr: palbpf.Addr16(b.Addr())}] = 1
	}
	for i, b := range fb.LocalBackends {
		w.be[palbpf.BackendKey{Id: id, Idx: uint32(len(fb.Backends) + i)}] = backendValue(b)
		w.live[palbpf.BackendLiveKey{Id: id, Port: b.Port(), Addr: palbpf.Addr16(b.Addr())}] = 1
	}
	if maglev {
		bs := fb.Backends
		if len(bs) > l.settings.maglevEndpoints {
			l.warnOnce("maglevEndpoints/"+fb.Service, log.Fields{"service": fb.Service, "bpfMaglevMaxEndpointsPerService": l.settings.maglevEndpoints},
				"More endpoints than bpfMaglevMaxEndpointsPerService: Maglev uses the first ones")
			bs = bs[:l.settings.maglevEndpoints]
		}
		m := maglevSize(l.settings.maglevEndpoints)
		v.Maglev = uint32(m)
		for slot, i := range maglevTable(bs, m) {
			w.maglev[palbpf.MaglevKey{Id: id, Slot: uint32(slot)}] = backendValue(bs[i])
		}
	}
	w.svc[palbpf.ServiceKey{Addr: palbpf.Addr16(f.Addr), Port: f.Port, Proto: proto}] = v
}

// readMap reads a whole map.
func readMap[K comparable, V any](m *ebpf.Map) (map[K]V, error) {
	out := map[K]V{}
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	return out, it.Err()
}

// syncMap writes what want has and have lacks or holds otherwise
// (put), and returns the keys to delete after (have's, not wanted).
func syncMap[K, V comparable](m *ebpf.Map, what string, want map[K]V, errs *[]error) []K {
	have, err := readMap[K, V](m)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("bpf: reading %s: %w", what, err))
		return nil
	}
	for k, v := range want {
		if h, ok := have[k]; !ok || h != v {
			if err := m.Put(k, v); err != nil {
				*errs = append(*errs, fmt.Errorf("bpf: writing %s %+v: %w", what, k, err))
			}
		}
	}
	var stale []K
	for k := range have {
		if _, ok := want[k]; !ok {
			stale = append(stale, k)
		}
	}
	return stale
}

func deleteKeys[K any](m *ebpf.Map, what string, keys []K, errs *[]error) {
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			*errs = append(*errs, fmt.Errorf("bpf: deleting %s %+v: %w", what, k, err))
		}
	}
}

func set[K comparable](in map[K]struct{}) map[K]uint8 {
	out := make(map[K]uint8, len(in))
	for k := range in {
		out[k] = 1
	}
	return out
}

// apply writes the difference between the maps and the wanted content.
func (l *lbMaps) apply(objs *palbpf.Objects) error {
	if !l.dirty {
		return nil
	}
	w := l.wanted()
	m := objs.Maps
	var errs []error
	if l.floating {
		w.cfg.Flags |= palbpf.NATConfigFloating
	}
	if err := m[palbpf.MapNATConfig].Put(uint32(0), w.cfg); err != nil {
		errs = append(errs, fmt.Errorf("bpf: writing %s: %w", palbpf.MapNATConfig, err))
	}
	staleOptout := syncMap(m[palbpf.MapDSROptout], "bpfDSROptoutCIDRs entry", set(w.optout), &errs)
	deleteKeys(m[palbpf.MapDSROptout], "bpfDSROptoutCIDRs entry", staleOptout, &errs)
	if l.want == nil {
		// Not read from the Kubernetes API yet (a restarted felix): the
		// frontends stay as the last felix left them, and so do the
		// flows through them.
		if len(errs) == 0 {
			l.dirty = false
		}
		return errors.Join(errs...)
	}
	if l.have == nil {
		h, err := l.readBack(objs)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		l.have, l.applied = h, nil
	}
	// target holds the wanted entries of the frontends in scope; old
	// the entries those frontends may hold now: every frontend after a
	// read back, else those that changed.
	mg := l.maglevFrontends()
	fronts := l.want.Frontends
	target, old := newLBHave(), newLBHave()
	if l.applied == nil {
		for f, fb := range fronts {
			l.addFrontend(target, f, fb, mg[f])
		}
		old = l.have
	} else {
		for f, fb := range fronts {
			was, ok := l.applied[f]
			if !ok || mg[f] != l.appliedMaglev[f] || !sameFrontend(was, fb) {
				l.addFrontend(target, f, fb, mg[f])
				if ok {
					l.addFrontend(old, f, was, l.appliedMaglev[f])
				}
			}
		}
		for f, was := range l.applied {
			if _, ok := fronts[f]; !ok {
				l.addFrontend(old, f, was, l.appliedMaglev[f])
			}
		}
	}
	target.nodes, old.nodes = w.nodes, l.have.nodes
	if err := l.write(objs, target, old, w.nodePorts); err != nil {
		l.have, l.applied = nil, nil // read back before the next try
		errs = append(errs, err)
	} else {
		l.applied, l.appliedMaglev = fronts, mg
	}
	if len(errs) == 0 {
		l.dirty = false
	}
	return errors.Join(errs...)
}

// readBack reads the hash maps into a new mirror.
func (l *lbMaps) readBack(objs *palbpf.Objects) (*lbHave, error) {
	h := newLBHave()
	m := objs.Maps
	err := errors.Join(
		readInto(&l.bufs.svc, m[palbpf.MapServices], h.svc),
		readInto(&l.bufs.be, m[palbpf.MapBackends], h.be),
		readInto(&l.bufs.live, m[palbpf.MapBackendsLive], h.live),
		readInto(&l.bufs.maglev, m[palbpf.MapMaglev], h.maglev),
		readInto(&l.bufs.nodes, m[palbpf.MapNodes], h.nodes))
	if err != nil {
		return nil, fmt.Errorf("bpf: reading the Service maps back: %w", err)
	}
	return h, nil
}

func readInto[K comparable, V any](b *batchBuf[K, V], m *ebpf.Map, into map[K]V) error {
	return b.walk(m, 1, func(ks []K, vs []V) {
		for i, k := range ks {
			into[k] = vs[i]
		}
	})
}

// write makes the maps (and the mirror) want: what frontends will name
// first, then the frontends and the node ports' bits, then what nothing
// names any more.
func (l *lbMaps) write(objs *palbpf.Objects, want, old *lbHave, nodePorts palbpf.NodePorts) error {
	m, h := objs.Maps, l.have
	if err := errors.Join(
		putChanged(m[palbpf.MapNodes], "node", want.nodes, h.nodes),
		putChanged(m[palbpf.MapBackends], "backend", want.be, h.be),
		putChanged(m[palbpf.MapBackendsLive], "backend", want.live, h.live),
		putChanged(m[palbpf.MapMaglev], "Maglev slot", want.maglev, h.maglev),
	); err != nil {
		return err
	}
	if err := putChanged(m[palbpf.MapServices], "frontend", want.svc, h.svc); err != nil {
		return err
	}
	// The node ports' bits after the frontends that need them, before
	// those that no longer do go (a stale bit costs a lookup, no more).
	if err := m[palbpf.MapNodePorts].Put(uint32(0), nodePorts); err != nil {
		return fmt.Errorf("bpf: writing %s: %w", palbpf.MapNodePorts, err)
	}
	if err := deleteStale(m[palbpf.MapServices], "frontends", old.svc, want.svc, h.svc); err != nil {
		return err
	}
	return errors.Join(
		deleteStale(m[palbpf.MapMaglev], "Maglev slots", old.maglev, want.maglev, h.maglev),
		deleteStale(m[palbpf.MapBackends], "backends", old.be, want.be, h.be),
		deleteStale(m[palbpf.MapBackendsLive], "backends", old.live, want.live, h.live),
		deleteStale(m[palbpf.MapNodes], "nodes", old.nodes, want.nodes, h.nodes))
}

// putChanged writes, in batches, want's entries that have lacks or holds
// otherwise; have follows.
func putChanged[K, V comparable](m *ebpf.Map, what string, want, have map[K]V) error {
	var keys []K
	var vals []V
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			keys, vals = append(keys, k), append(vals, v)
		}
	}
	for i := 0; i < len(keys); i += batchSize {
		j := min(len(keys), i+batchSize)
		if _, err := m.BatchUpdate(keys[i:j], vals[i:j], nil); err != nil {
			return fmt.Errorf("bpf: writing %s entries: %w", what, err)
		}
		for n := i; n < j; n++ {
			have[keys[n]] = vals[n]
		}
	}
	return nil
}

// deleteStale deletes, in batches, the entries of old (a frontend's
// former ones, or have itself) that want has not and have holds; have
// follows.
func deleteStale[K comparable, V any](m *ebpf.Map, what string, old, want, have map[K]V) error {
	var keys []K
	for k := range old {
		_, wanted := want[k]
		if _, held := have[k]; held && !wanted {
			keys = append(keys, k)
		}
	}
	if _, err := deleteAll(m, keys); err != nil {
		return fmt.Errorf("bpf: deleting %s: %w", what, err)
	}
	for _, k := range keys {
		delete(have, k)
	}
	return nil
}

// applyTunnel makes the node port tunnel's device when it is missing
// (at start, after a read back) and tells the programs its index.
func (d *Driver) applyTunnel() error {
	if d.lb.tunnel != 0 && !d.lb.dirty {
		if idx, ok := d.linkIndex[palbpf.TunnelDevice]; ok && idx == d.lb.tunnel {
			return nil
		}
	}
	idx, err := palbpf.EnsureTunnel(d.run)
	if err != nil {
		return err
	}
	if idx != d.lb.tunnel {
		d.lb.tunnel, d.lb.dirty = idx, true
	}
	return nil
}

// applyFloating makes MapFloating the workloads' floating IPs (their
// ipNATs, when floatingIPs is Enabled): the programs of each workload's
// interface translate them (c/nat.h).
func (d *Driver) applyFloating() error {
	var errs []error
	if floating := len(d.fipWant) > 0; floating != d.lb.floating {
		// The frontends' pass writes the flag: before the floating IPs
		// when there are some, after them when none are left.
		d.lb.floating, d.lb.dirty = floating, true
		if floating {
			if err := d.lb.apply(d.objs); err != nil {
				errs = append(errs, err)
			}
		}
	}
	m := d.objs.Maps[palbpf.MapFloating]
	stale := syncMap(m, "floating IP", d.fipWant, &errs)
	deleteKeys(m, "floating IP", stale, &errs)
	return errors.Join(errs...)
}

// withFloating fills the nat table's floating IP chains (cali-fip-dnat,
// cali-fip-snat) as the iptables dataplane does: the programs translate
// the packets of workloads and from outside before netfilter sees them,
// these the host's own (OUTPUT), which no program sees before routing.
func (d *Driver) withFloating(chains []rules.Chain, family int) []rules.Chain {
	var natters []*calc.Endpoint
	for _, ep := range d.endpoints {
		if len(ep.IPNATs) > 0 {
			natters = append(natters, ep)
		}
	}
	fip := rules.FloatingChains(rules.Input{Config: d.cfg, IPVersion: family}, natters)
	out := make([]rules.Chain, 0, len(chains))
	for _, c := range chains {
		if rules.IsFloatingChain(c.Name) {
			continue
		}
		out = append(out, c)
	}
	return append(out, fip...)
}
