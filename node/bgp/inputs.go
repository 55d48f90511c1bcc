package bgp

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
	"github.com/palisade-net/palisade/node/bgp/paths"
)

// inputKinds are the resource kinds the speaker reads.
var inputKinds = []string{v3.KindNode, v3.KindBGPPeer, v3.KindBGPConfiguration, v3.KindIPPool, v3.KindBGPFilter,
	v3.KindFelixConfiguration, v3.KindWorkloadEndpoint}

// inputs keeps in memory what the speaker reads from the datastore, up to
// date through watches, so that a round reads memory, not etcd: each kind
// is listed once and then watched from the list's revision (listed again
// only when its watch ends: a compaction, etcd lost), and IPAM is
// followed through raw-key watches of this node's affinities and of the
// blocks. Only what BGP uses is kept: the BGPConfigurations and
// FelixConfigurations `default` and `node.<name>`, this node's
// affinities, of each block its CIDR and the holders of its addresses, of
// each WorkloadEndpoint its floating IPs and (this node's) addresses.
// poke is called after every change that can change what the node does
// (another node's pod starting does not).
type inputs struct {
	node  string
	store datastore.Interface
	kv    datastore.KV
	log   *log.Entry
	poke  func()
	// retry is the pause before listing again after an error; poll how
	// often IPAM is listed when the store cannot watch raw keys.
	retry, poll time.Duration

	mu      sync.Mutex
	res     map[string]map[string]v3.Resource // kind → namespace/name → resource
	weps    map[string]wepAddrs               // namespace/name → what BGP uses
	affs    map[string]ipam.Affinity          // this node's, by key
	blocks  map[string]blockHolders           // by key
	holders map[string]string                 // interned holder names
	listed  map[string]bool
	ready   chan struct{} // closed once everything was listed
}

// wepAddrs is what BGP uses of a WorkloadEndpoint.
type wepAddrs struct {
	node     string
	floating []netip.Addr // ipNATs external IPs
	own      []netip.Addr // ipNetworks, of this node's endpoints only
	// wep is the whole endpoint when it is this node's (local workload
	// peering selects among them by labels).
	wep *v3.WorkloadEndpoint
}

// blockHolders is what BGP uses of an IPAM block: its CIDR, its owner,
// and which node holds each allocated address.
type blockHolders struct {
	cidr   netip.Prefix
	host   string
	allocs []holderAlloc
}

type holderAlloc struct {
	ip     netip.Addr
	holder string
}

// IPAM pseudo-kinds, for the listed set.
const (
	kindAffinities = "ipam-affinities"
	kindBlocks     = "ipam-blocks"
)

func newInputs(cfg Config, poke func()) *inputs {
	return &inputs{node: cfg.NodeName, store: cfg.Store, kv: cfg.KV, log: cfg.Log.WithField("component", "inputs"), poke: poke,
		retry: time.Second, poll: cfg.PollInterval,
		res: map[string]map[string]v3.Resource{}, weps: map[string]wepAddrs{}, affs: map[string]ipam.Affinity{},
		blocks: map[string]blockHolders{}, holders: map[string]string{}, listed: map[string]bool{}, ready: make(chan struct{})}
}

// run follows every input until ctx ends.
func (in *inputs) run(ctx context.Context) {
	for _, kind := range inputKinds {
		go in.runKind(ctx, kind)
	}
	go in.runKV(ctx, kindAffinities, ipam.AffinitiesPrefix+in.node+"/")
	go in.runKV(ctx, kindBlocks, ipam.BlocksPrefix)
}

// Ready is closed once every input has been listed.
func (in *inputs) Ready() <-chan struct{} { return in.ready }

func (in *inputs) markListed(kind string) {
	in.listed[kind] = true
	if len(in.listed) == len(inputKinds)+2 {
		select {
		case <-in.ready:
		default:
			close(in.ready)
		}
	}
}

func (in *inputs) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(in.retry):
	}
}

// runKind lists and watches one kind for ever.
func (in *inputs) runKind(ctx context.Context, kind string) {
	logc := in.log.WithField("kind", kind)
	for ctx.Err() == nil {
		items, rev, err := in.store.List(ctx, datastore.ListOptions{Kind: kind})
		if err != nil {
			if ctx.Err() == nil {
				logc.WithError(err).Warn("Listing failed; retrying")
			}
			in.pause(ctx)
			continue
		}
		in.replace(kind, items)
		w, err := in.store.Watch(ctx, datastore.ListOptions{Kind: kind}, rev)
		if err != nil {
			if ctx.Err() == nil {
				logc.WithError(err).Warn("Watch failed; listing again")
			}
			in.pause(ctx)
			continue
		}
		for ev := range w.Events() {
			switch ev.Type {
			case datastore.Error:
				logc.WithError(ev.Err).Debug("Watch error")
			case datastore.Deleted:
				in.set(kind, ev.Object, true)
			default:
				in.set(kind, ev.Object, false)
			}
		}
		w.Stop()
		if ctx.Err() == nil {
			logc.Info("Watch ended; listing again")
		}
	}
}

// resKey names a resource within its kind.
func resKey(r v3.Resource) string {
	m := r.GetObjectMeta()
	if m.Namespace != "" {
		return m.Namespace + "/" + m.Name
	}
	return m.Name
}

// wanted says whether a resource of kind is kept at all.
func (in *inputs) wanted(kind string, r v3.Resource) bool {
	switch kind {
	case v3.KindBGPConfiguration, v3.KindFelixConfiguration:
		n := r.GetObjectMeta().Name
		return n == "default" || n == "node."+in.node
	}
	return true
}

// replace installs a fresh list of kind.
func (in *inputs) replace(kind string, items []v3.Resource) {
	in.mu.Lock()
	changed := false
	if kind == v3.KindWorkloadEndpoint {
		fresh := map[string]wepAddrs{}
		for _, r := range items {
			if w, ok := r.(*v3.WorkloadEndpoint); ok {
				if a, keep := in.wepAddrs(w); keep {
					fresh[resKey(r)] = a
				}
			}
		}
		changed = !reflect.DeepEqual(fresh, in.weps)
		in.weps = fresh
	} else {
		fresh := map[string]v3.Resource{}
		for _, r := range items {
			if in.wanted(kind, r) {
				fresh[resKey(r)] = r
			}
		}
		old := in.res[kind]
		changed = len(old) != len(fresh)
		for k, r := range fresh {
			changed = changed || !sameInput(old[k], r)
		}
		in.res[kind] = fresh
	}
	first := !in.listed[kind]
	in.markListed(kind)
	in.mu.Unlock()
	if changed || first {
		in.poke()
	}
}

// set applies one watched change.
func (in *inputs) set(kind string, r v3.Resource, deleted bool) {
	if r == nil || !in.wanted(kind, r) {
		return
	}
	key := resKey(r)
	in.mu.Lock()
	changed := false
	if kind == v3.KindWorkloadEndpoint {
		w, _ := r.(*v3.WorkloadEndpoint)
		old, had := in.weps[key]
		a, keep := wepAddrs{}, false
		if w != nil && !deleted {
			a, keep = in.wepAddrs(w)
		}
		switch {
		case keep:
			changed = !had || !reflect.DeepEqual(old, a)
			in.weps[key] = a
		case had:
			changed = true
			delete(in.weps, key)
		}
	} else {
		m := in.res[kind]
		if m == nil {
			m = map[string]v3.Resource{}
			in.res[kind] = m
		}
		old, had := m[key]
		if deleted {
			changed = had
			delete(m, key)
		} else {
			changed = !had || !sameInput(old, r)
			m[key] = r
		}
	}
	in.mu.Unlock()
	if changed {
		in.poke()
	}
}

// sameInput says whether a change of a resource leaves what BGP reads of
// it as it was: a Node's status, annotations or resourceVersion do not
// count, only its labels (selectors) and spec.
func sameInput(old, cur v3.Resource) bool {
	if old == nil {
		return false
	}
	o, ok1 := old.(*v3.Node)
	c, ok2 := cur.(*v3.Node)
	if ok1 && ok2 {
		return reflect.DeepEqual(o.Labels, c.Labels) && reflect.DeepEqual(o.Spec, c.Spec)
	}
	return old.GetObjectMeta().ResourceVersion == cur.GetObjectMeta().ResourceVersion && reflect.DeepEqual(old, cur)
}

// wepAddrs reduces a WorkloadEndpoint to what BGP uses of it; keep is
// false when that is nothing (another node's endpoint without floating
// IPs).
func (in *inputs) wepAddrs(w *v3.WorkloadEndpoint) (wepAddrs, bool) {
	a := wepAddrs{node: w.Spec.Node}
	for _, n := range w.Spec.IPNATs {
		if ip, err := netip.ParseAddr(n.ExternalIP); err == nil {
			a.floating = append(a.floating, ip)
		}
	}
	if w.Spec.Node == in.node {
		a.wep = w
		for _, n := range w.Spec.IPNetworks {
			if p, err := netip.ParsePrefix(n); err == nil && p.IsSingleIP() {
				a.own = append(a.own, p.Addr())
			} else if ip, err := netip.ParseAddr(n); err == nil {
				a.own = append(a.own, ip)
			}
		}
	}
	return a, len(a.floating) > 0 || w.Spec.Node == in.node
}

// runKV lists and watches the raw keys under prefix for ever (lists them
// every poll interval when the store cannot watch raw keys).
func (in *inputs) runKV(ctx context.Context, kind, prefix string) {
	logc := in.log.WithField("kind", kind)
	watcher, canWatch := in.store.(datastore.KVWatcher)
	for ctx.Err() == nil {
		pairs, rev, err := in.kv.List(ctx, prefix)
		if err != nil {
			if ctx.Err() == nil {
				logc.WithError(err).Warn("Listing failed; retrying")
			}
			in.pause(ctx)
			continue
		}
		in.replaceKV(kind, pairs)
		if !canWatch {
			select {
			case <-ctx.Done():
			case <-time.After(in.poll):
			}
			continue
		}
		events, err := watcher.WatchKV(ctx, prefix, rev)
		if err != nil {
			if ctx.Err() == nil {
				logc.WithError(err).Warn("Watch failed; listing again")
			}
			in.pause(ctx)
			continue
		}
		for ev := range events {
			in.setKV(kind, ev.Pair, ev.Type == datastore.Deleted)
		}
		if ctx.Err() == nil {
			logc.Info("Watch ended; listing again")
		}
	}
}

func (in *inputs) replaceKV(kind string, pairs []datastore.KVPair) {
	in.mu.Lock()
	changed := false
	switch kind {
	case kindAffinities:
		fresh := map[string]ipam.Affinity{}
		for _, p := range pairs {
			if a, err := ipam.ParseAffinity(p); err == nil {
				a.Revision = 0
				fresh[p.Key] = a
			}
		}
		changed = !reflect.DeepEqual(fresh, in.affs)
		in.affs = fresh
	case kindBlocks:
		fresh := map[string]blockHolders{}
		for _, p := range pairs {
			if b, ok := in.parseBlock(p); ok {
				fresh[p.Key] = b
			}
		}
		for k, b := range fresh {
			changed = changed || in.relevant(in.blocks[k]) != in.relevant(b)
		}
		for k := range in.blocks {
			if _, ok := fresh[k]; !ok {
				changed = true
			}
		}
		in.blocks = fresh
	}
	first := !in.listed[kind]
	in.markListed(kind)
	in.mu.Unlock()
	if changed || first {
		in.poke()
	}
}

func (in *inputs) setKV(kind string, p datastore.KVPair, deleted bool) {
	in.mu.Lock()
	changed := false
	switch kind {
	case kindAffinities:
		_, had := in.affs[p.Key]
		if deleted {
			changed = had
			delete(in.affs, p.Key)
		} else if a, err := ipam.ParseAffinity(p); err == nil {
			a.Revision = 0
			changed = !had || in.affs[p.Key] != a
			in.affs[p.Key] = a
		}
	case kindBlocks:
		old, had := in.blocks[p.Key]
		if deleted {
			changed = had
			delete(in.blocks, p.Key)
		} else if b, ok := in.parseBlock(p); ok {
			changed = !had || in.relevant(old) != in.relevant(b)
			in.blocks[p.Key] = b
		}
	}
	in.mu.Unlock()
	if changed {
		in.poke()
	}
}

// parseBlock reduces a stored block to its CIDR, owner and holders.
func (in *inputs) parseBlock(p datastore.KVPair) (blockHolders, bool) {
	b, err := ipam.ParseBlock(p)
	if err != nil {
		in.log.WithError(err).WithField("key", p.Key).Debug("Skipping an IPAM block that does not decode")
		return blockHolders{}, false
	}
	out := blockHolders{cidr: b.CIDR.Masked(), host: in.intern(b.Host)}
	for _, a := range b.Allocations {
		if h := a.Attrs[ipam.AttrNode]; h != "" {
			out.allocs = append(out.allocs, holderAlloc{ip: a.IP, holder: in.intern(h)})
		}
	}
	return out, true
}

// intern shares one copy of each node name among the blocks.
func (in *inputs) intern(s string) string {
	if v, ok := in.holders[s]; ok {
		return v
	}
	in.holders[s] = s
	return s
}

// mine says whether this node has an affinity (of any state) for cidr.
func (in *inputs) mine(cidr netip.Prefix) bool {
	for _, a := range in.affs {
		if a.CIDR.Masked() == cidr {
			return true
		}
	}
	return false
}

// relevant is what a block means to this node, as a comparable string:
// its CIDR, and the holders paths.Compute reads (all of a block of this
// node's, this node's own in another's). Another node's pod starting in
// its own block leaves it unchanged.
func (in *inputs) relevant(b blockHolders) string {
	if !b.cidr.IsValid() {
		return ""
	}
	var sb strings.Builder
	sb.WriteString(b.cidr.String())
	all := b.host == in.node || in.mine(b.cidr)
	for _, a := range b.allocs {
		if all || a.holder == in.node {
			sb.WriteString(" " + a.ip.String() + "=" + a.holder)
		}
	}
	return sb.String()
}

// snapshot is one consistent copy of the inputs, sorted by key as the
// datastore lists them.
type snapshot struct {
	nodes      []v3.Node
	bgpPeers   []v3.BGPPeer
	configs    []v3.BGPConfiguration
	pools      []v3.IPPool
	filters    []v3.BGPFilter
	felix      []v3.FelixConfiguration
	floating   []paths.Floating
	workloads  []paths.Floating
	local      []v3.WorkloadEndpoint // this node's
	affinities []ipam.Affinity
	blocks     []ipam.Block
}

// snapshot copies the inputs.
func (in *inputs) snapshot() snapshot {
	in.mu.Lock()
	defer in.mu.Unlock()
	var s snapshot
	each := func(kind string, fn func(v3.Resource)) {
		m := in.res[kind]
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fn(m[k])
		}
	}
	each(v3.KindNode, func(r v3.Resource) { s.nodes = append(s.nodes, *r.(*v3.Node)) })
	each(v3.KindBGPPeer, func(r v3.Resource) { s.bgpPeers = append(s.bgpPeers, *r.(*v3.BGPPeer)) })
	each(v3.KindBGPConfiguration, func(r v3.Resource) { s.configs = append(s.configs, *r.(*v3.BGPConfiguration)) })
	each(v3.KindIPPool, func(r v3.Resource) { s.pools = append(s.pools, *r.(*v3.IPPool)) })
	each(v3.KindBGPFilter, func(r v3.Resource) { s.filters = append(s.filters, *r.(*v3.BGPFilter)) })
	each(v3.KindFelixConfiguration, func(r v3.Resource) { s.felix = append(s.felix, *r.(*v3.FelixConfiguration)) })

	keys := make([]string, 0, len(in.weps))
	for k := range in.weps {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w := in.weps[k]
		for _, a := range w.floating {
			s.floating = append(s.floating, paths.Floating{Node: w.node, Addr: a})
		}
		for _, a := range w.own {
			s.workloads = append(s.workloads, paths.Floating{Node: w.node, Addr: a})
		}
		if w.wep != nil {
			s.local = append(s.local, *w.wep)
		}
	}

	keys = keys[:0]
	for k := range in.affs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s.affinities = append(s.affinities, in.affs[k])
	}

	keys = keys[:0]
	for k := range in.blocks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b := in.blocks[k]
		out := ipam.Block{CIDR: b.cidr, Host: b.host}
		all := b.host == in.node || in.mine(b.cidr)
		for _, a := range b.allocs {
			if all || a.holder == in.node {
				out.Allocations = append(out.Allocations, ipam.Allocation{IP: a.ip, Attrs: map[string]string{ipam.AttrNode: a.holder}})
			}
		}
		s.blocks = append(s.blocks, out)
	}
	return s
}
