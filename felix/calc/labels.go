package calc

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/palisade-net/palisade/libcalico/selector"
)

// Label keys Calico gives every endpoint, and the prefixes under which an
// endpoint sees its namespace's and service account's labels.
const (
	LabelNamespace      = "projectcalico.org/namespace"
	LabelServiceAccount = "projectcalico.org/serviceaccount"
	NamespaceLabel      = "pcns."
	ServiceAccountLabel = "pcsa."
	// NamespaceProfilePrefix names the profile that carries a namespace's
	// labels (kns.<namespace>); ServiceAccountProfilePrefix the one that
	// carries a service account's (ksa.<namespace>.<account>).
	NamespaceProfilePrefix      = "kns."
	ServiceAccountProfilePrefix = "ksa."
)

// itemKind tells apart the things whose addresses can be IP set members.
type itemKind uint8

const (
	itemWorkload itemKind = iota
	itemHost
	itemNetworkSet
)

// namedPort is a named port of an endpoint.
type namedPort struct {
	name, proto string
	port        uint16
}

// item is one endpoint or network set anywhere in the cluster, as the label
// index sees it. It implements selector.Labels: its own labels, then the
// built-in namespace and service-account labels, then the namespace's
// labels under pcns., then the labelsToApply of its profiles.
type item struct {
	idx        *labelIndex
	kind       itemKind
	namespaced bool
	ns, sa     string
	labels     map[string]string
	profiles   []string
	nets       []netip.Prefix
	ports      []namedPort
	// sets are the IP sets the item is in (dead ones are skipped).
	sets []*ipSetState
	// node, pod and iface are an endpoint's node (interned), pod (a
	// WorkloadEndpoint's spec.pod) and interface, for explanations; key
	// is its key in the index.
	node, pod, iface, key string
}

// Get implements selector.Labels.
func (it *item) Get(key string) (string, bool) {
	if v, ok := it.labels[key]; ok {
		return v, true
	}
	switch {
	case key == LabelNamespace:
		return it.ns, it.namespaced
	case key == LabelServiceAccount:
		return it.sa, it.sa != ""
	case strings.HasPrefix(key, NamespaceLabel):
		if it.namespaced {
			v, ok := it.idx.nsLabels[it.ns][key[len(NamespaceLabel):]]
			return v, ok
		}
		return "", false
	case strings.HasPrefix(key, ServiceAccountLabel):
		if it.sa != "" {
			v, ok := it.idx.saLabels[it.ns+"/"+it.sa][key[len(ServiceAccountLabel):]]
			return v, ok
		}
		return "", false
	}
	for _, p := range it.profiles {
		if v, ok := it.idx.profileLabels[p][key]; ok {
			return v, true
		}
	}
	return "", false
}

// ipSetSpec defines an IP set: the items it draws from and what each one
// contributes (its addresses, or its named port as ip,port).
type ipSetSpec struct {
	id  string
	sel *selector.Selector // nil: all()
	// namespace, when set, limits the set to items of that namespace.
	namespace string
	// nsSel, when set, limits it to namespaced items whose namespace's
	// labels match; nsGlobal to items without a namespace.
	nsSel    *selector.Selector
	nsGlobal bool
	// Service accounts: names (any of) and a selector over the account's
	// labels; hasSA says either was given.
	hasSA   bool
	saNames []string
	saSel   *selector.Selector
	// namedPort and proto make it an ip,port set.
	namedPort, proto string
	// service ("namespace/name") makes it the set of a Service's
	// endpoints, filled by the service index: addresses, or with
	// svcPorts address,proto:port members.
	service  string
	svcPorts bool
	// pools marks the IP pool sets, whose members are set directly.
	pools bool
}

func (s *ipSetSpec) setType() IPSetType {
	if s.namedPort != "" || s.svcPorts {
		return IPSetIPPort
	}
	return IPSetNet
}

func (s *ipSetSpec) matches(it *item) bool {
	if s.pools || s.service != "" {
		return false
	}
	if s.namespace != "" && (!it.namespaced || it.ns != s.namespace) {
		return false
	}
	if s.nsGlobal && it.namespaced {
		return false
	}
	if s.nsSel != nil && (!it.namespaced || !s.nsSel.Evaluate(it.idx.nsLabels[it.ns])) {
		return false
	}
	if s.hasSA {
		if it.sa == "" {
			return false
		}
		if len(s.saNames) > 0 && !slices.Contains(s.saNames, it.sa) {
			return false
		}
		if s.saSel != nil && !s.saSel.Evaluate(it.idx.saLabels[it.ns+"/"+it.sa]) {
			return false
		}
	}
	if s.namedPort != "" && it.kind == itemNetworkSet {
		return false
	}
	return s.sel == nil || s.sel.EvaluateLabels(it)
}

// members returns what an item contributes to a set it matches.
func (s *ipSetSpec) members(it *item, out []string) []string {
	if s.namedPort == "" {
		for _, n := range it.nets {
			out = append(out, netMember(n))
		}
		return out
	}
	for _, p := range it.ports {
		if p.name != s.namedPort || p.proto != s.proto {
			continue
		}
		for _, n := range it.nets {
			if n.IsSingleIP() {
				out = append(out, n.Addr().String()+","+p.proto+":"+strconv.Itoa(int(p.port)))
			}
		}
	}
	return out
}

// netMember writes a prefix the way `ipset list` prints a hash:net member.
func netMember(p netip.Prefix) string {
	p = p.Masked()
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// ipSetState is an active IP set: its members with the number of items
// contributing each.
type ipSetState struct {
	spec *ipSetSpec
	refs int
	dead bool
	// pending sets are filled by the next scanPending, not yet joined.
	pending bool
	members map[string]int
	// key is a label key every item the set takes has ("" for none; see
	// labelIndex.byKey); tried marks the set as tried for an item.
	key   string
	tried uint64
}

// labelIndex is the stage that keeps IP set membership: every item in the
// cluster is matched against the active sets it may be in (see byKey),
// incrementally on both sides.
type labelIndex struct {
	items map[string]*item
	sets  map[string]*ipSetState
	// Label sources items look up through Get.
	nsLabels      map[string]map[string]string
	saLabels      map[string]map[string]string
	profileLabels map[string]map[string]string
	out           *sequencer
	scratch       []string
	// pending are sets activated since the last scanPending.
	pending []*ipSetState
	// byKey holds the active sets whose selector needs a label key, under
	// that key, and unkeyed the others: an item is tried only against the
	// sets of the keys it has, and the unkeyed ones. With 250,000
	// endpoints of a few labels each and sets that each need one label,
	// that is a few map lookups per endpoint instead of a selector per set.
	byKey   map[string][]*ipSetState
	unkeyed []*ipSetState
	// prefixedKeys counts the keyed sets under a pcns. or pcsa. key (an
	// item's namespace and service-account labels are only listed then).
	prefixedKeys int
	// tries numbers the candidate walks (ipSetState.tried).
	tries uint64
	// byAddr holds the items by the address of each host net (/32,
	// /128) they have (more than one item of an address go to
	// sharedAddr) and wide those with a wider net: an explanation finds
	// the holders of an address without walking 250,000 items.
	byAddr     map[netip.Addr]*item
	sharedAddr map[netip.Addr][]*item
	wide       map[*item]struct{}
	// hosts holds the host endpoints; pods the WorkloadEndpoints by
	// namespace/pod.
	hosts map[*item]struct{}
	pods  map[string][]*item
	// services fills the sets of rules naming a Service; svcSets holds
	// those sets by Service (they are not filed in byKey or unkeyed: no
	// item is ever in one).
	services *serviceIndex
	svcSets  map[string]map[*ipSetState]struct{}
}

// indexLookups files an item by its addresses, and a host endpoint or
// pod by what names it.
func (x *labelIndex) indexLookups(it *item) {
	switch it.kind {
	case itemHost:
		x.hosts[it] = struct{}{}
	case itemWorkload:
		if it.pod != "" {
			x.pods[it.ns+"/"+it.pod] = append(x.pods[it.ns+"/"+it.pod], it)
		}
	}
	for _, n := range it.nets {
		if !n.IsSingleIP() {
			x.wide[it] = struct{}{}
			continue
		}
		a := n.Addr()
		switch first, ok := x.byAddr[a]; {
		case !ok:
			x.byAddr[a] = it
		case first != it && !slices.Contains(x.sharedAddr[a], it):
			x.sharedAddr[a] = append(x.sharedAddr[a], it)
		}
	}
}

// unindexLookups removes what indexLookups filed.
func (x *labelIndex) unindexLookups(it *item) {
	delete(x.hosts, it)
	if it.kind == itemWorkload && it.pod != "" {
		pk := it.ns + "/" + it.pod
		if ps := slices.DeleteFunc(x.pods[pk], func(o *item) bool { return o == it }); len(ps) > 0 {
			x.pods[pk] = ps
		} else {
			delete(x.pods, pk)
		}
	}
	delete(x.wide, it)
	for _, n := range it.nets {
		if !n.IsSingleIP() {
			continue
		}
		a := n.Addr()
		shared := slices.DeleteFunc(x.sharedAddr[a], func(o *item) bool { return o == it })
		if x.byAddr[a] == it {
			if len(shared) > 0 {
				x.byAddr[a], shared = shared[0], shared[1:]
			} else {
				delete(x.byAddr, a)
			}
		}
		if len(shared) == 0 {
			delete(x.sharedAddr, a)
		} else {
			x.sharedAddr[a] = shared
		}
	}
}

// holders are the items that hold a, sorted by key.
func (x *labelIndex) holders(a netip.Addr) []*item {
	var out []*item
	if it := x.byAddr[a]; it != nil {
		out = append(out, it)
	}
	out = append(out, x.sharedAddr[a]...)
	for it := range x.wide {
		for _, n := range it.nets {
			if n.Contains(a) {
				out = append(out, it)
				break
			}
		}
	}
	slices.SortFunc(out, func(p, q *item) int { return strings.Compare(p.key, q.key) })
	return slices.CompactFunc(out, func(p, q *item) bool { return p == q })
}

func newLabelIndex(out *sequencer) *labelIndex {
	return &labelIndex{
		items:         map[string]*item{},
		sets:          map[string]*ipSetState{},
		nsLabels:      map[string]map[string]string{},
		saLabels:      map[string]map[string]string{},
		profileLabels: map[string]map[string]string{},
		out:           out,
		byKey:         map[string][]*ipSetState{},
		byAddr:        map[netip.Addr]*item{},
		sharedAddr:    map[netip.Addr][]*item{},
		wide:          map[*item]struct{}{},
		hosts:         map[*item]struct{}{},
		pods:          map[string][]*item{},
		services:      newServiceIndex(),
		svcSets:       map[string]map[*ipSetState]struct{}{},
	}
}

// candidates calls fn once for every active set the item may be in: the
// unkeyed ones and those under a key the item has (its own labels, the
// built-in namespace and service-account keys, its namespace's and
// service account's labels, its profiles' labels). That is every key
// item.Get finds, and maybe more; fn still checks the set's spec.
func (x *labelIndex) candidates(it *item, fn func(*ipSetState)) {
	for _, s := range x.unkeyed {
		fn(s)
	}
	if len(x.byKey) == 0 {
		return
	}
	x.tries++
	try := func(key string) {
		for _, s := range x.byKey[key] {
			if s.tried != x.tries {
				s.tried = x.tries
				fn(s)
			}
		}
	}
	for k := range it.labels {
		try(k)
	}
	if it.namespaced {
		try(LabelNamespace)
		if x.prefixedKeys > 0 {
			for k := range x.nsLabels[it.ns] {
				try(NamespaceLabel + k)
			}
		}
	}
	if it.sa != "" {
		try(LabelServiceAccount)
		if x.prefixedKeys > 0 {
			for k := range x.saLabels[it.ns+"/"+it.sa] {
				try(ServiceAccountLabel + k)
			}
		}
	}
	for _, p := range it.profiles {
		for k := range x.profileLabels[p] {
			try(k)
		}
	}
}

// index files an active set under its key, or with the unkeyed ones.
func (x *labelIndex) index(s *ipSetState) {
	if s.spec.sel != nil {
		s.key = s.spec.sel.RequiredKey()
	}
	if s.key == "" {
		x.unkeyed = append(x.unkeyed, s)
		return
	}
	x.byKey[s.key] = append(x.byKey[s.key], s)
	if prefixedKey(s.key) {
		x.prefixedKeys++
	}
}

// prefixedKey reports whether key names a namespace or service-account
// label (pcns., pcsa.).
func prefixedKey(key string) bool {
	return strings.HasPrefix(key, NamespaceLabel) || strings.HasPrefix(key, ServiceAccountLabel)
}

// unindex removes a set filed by index.
func (x *labelIndex) unindex(s *ipSetState) {
	drop := func(list []*ipSetState) []*ipSetState {
		if i := slices.Index(list, s); i >= 0 {
			list[i] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
		}
		return list
	}
	if s.key == "" {
		x.unkeyed = drop(x.unkeyed)
		return
	}
	if list := drop(x.byKey[s.key]); len(list) > 0 {
		x.byKey[s.key] = list
	} else {
		delete(x.byKey, s.key)
	}
	if prefixedKey(s.key) {
		x.prefixedKeys--
	}
}

// setItem adds, replaces (or with nil, removes) an item.
func (x *labelIndex) setItem(key string, it *item) {
	if old := x.items[key]; old != nil {
		x.leaveAll(old)
		x.unindexLookups(old)
	}
	if it == nil {
		delete(x.items, key)
		return
	}
	it.idx, it.key = x, key
	x.items[key] = it
	x.indexLookups(it)
	x.candidates(it, func(s *ipSetState) {
		if !s.pending {
			x.join(it, s)
		}
	})
}

// reevaluate recomputes the memberships of the items keep selects, after a
// label source they read changed.
func (x *labelIndex) reevaluate(keep func(*item) bool) {
	if len(x.sets) == 0 {
		return
	}
	for _, it := range x.items {
		if !keep(it) {
			continue
		}
		x.leaveAll(it)
		x.candidates(it, func(s *ipSetState) {
			if !s.pending {
				x.join(it, s)
			}
		})
	}
}

// scanPending fills the sets activated since the last call, in one pass
// over the items (each item's labels are read once for all of them).
func (x *labelIndex) scanPending() {
	live := x.pending[:0]
	for _, s := range x.pending {
		switch {
		case s.dead:
		case s.spec.service != "":
			s.pending = false
			x.fillService(s)
		default:
			live = append(live, s)
		}
	}
	x.pending = x.pending[:0]
	if len(live) == 0 {
		return
	}
	for _, it := range x.items {
		x.candidates(it, func(s *ipSetState) {
			if s.pending {
				x.join(it, s)
			}
		})
	}
	for _, s := range live {
		s.pending = false
	}
}

func (x *labelIndex) join(it *item, s *ipSetState) {
	if !s.spec.matches(it) {
		return
	}
	it.sets = append(it.sets, s)
	x.scratch = s.spec.members(it, x.scratch[:0])
	for _, m := range x.scratch {
		x.addMember(s, m)
	}
}

func (x *labelIndex) leaveAll(it *item) {
	for _, s := range it.sets {
		if s.dead {
			continue
		}
		x.scratch = s.spec.members(it, x.scratch[:0])
		for _, m := range x.scratch {
			x.removeMember(s, m)
		}
	}
	it.sets = it.sets[:0]
}

func (x *labelIndex) addMember(s *ipSetState, m string) {
	n := s.members[m]
	s.members[m] = n + 1
	if n == 0 {
		x.out.memberAdded(s, m)
	}
}

func (x *labelIndex) removeMember(s *ipSetState, m string) {
	n := s.members[m]
	if n <= 1 {
		delete(s.members, m)
		if n == 1 {
			x.out.memberRemoved(s, m)
		}
		return
	}
	s.members[m] = n - 1
}

// ref takes a reference on the set spec defines, activating it on the
// first one; scanPending fills it.
func (x *labelIndex) ref(spec *ipSetSpec) {
	if s := x.sets[spec.id]; s != nil {
		s.refs++
		return
	}
	s := &ipSetState{spec: spec, refs: 1, members: map[string]int{}, pending: true}
	x.sets[spec.id] = s
	if spec.service != "" {
		if x.svcSets[spec.service] == nil {
			x.svcSets[spec.service] = map[*ipSetState]struct{}{}
		}
		x.svcSets[spec.service][s] = struct{}{}
	} else {
		x.index(s)
	}
	x.out.setActivated(s)
	x.pending = append(x.pending, s)
}

// unref drops a reference; the last one deactivates the set.
func (x *labelIndex) unref(id string) {
	s := x.sets[id]
	if s == nil {
		return
	}
	if s.refs--; s.refs > 0 {
		return
	}
	s.dead = true
	delete(x.sets, id)
	if svc := s.spec.service; svc != "" {
		delete(x.svcSets[svc], s)
		if len(x.svcSets[svc]) == 0 {
			delete(x.svcSets, svc)
		}
	} else {
		x.unindex(s)
	}
	x.out.setDeactivated(id)
}
