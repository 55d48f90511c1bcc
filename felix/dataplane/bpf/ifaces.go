package bpf

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	log "github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// linkInfo is an interface of the node.
type linkInfo struct {
	name  string
	index int
	// l2 is the length of its link-layer header (14 for Ethernet and
	// loopback, 0 for layer 3 devices).
	l2 uint32
	// group is its device group (palbpf.AttachedGroup once a workload
	// interface's hooks are attached).
	group uint32
	// veth: a veth, whose workload's packets may go straight to its peer.
	veth bool
}

func linkInfoOf(l netlink.Link) linkInfo {
	a := l.Attrs()
	return linkInfo{name: a.Name, index: a.Index, l2: l2len(l), group: a.Group, veth: l.Type() == "veth"}
}

// linkWatch follows the node's interfaces through netlink, so a new
// workload interface is dropped (its program attached) as soon as it
// appears, not at the next refresh.
type linkWatch struct {
	mu      sync.Mutex
	byName  map[string]linkInfo
	relist  bool
	h       *netlink.Handle
	done    chan struct{}
	stopped chan struct{}
}

func l2len(l netlink.Link) uint32 {
	switch l.Attrs().EncapType {
	case "ether", "loopback":
		return 14
	}
	return 0
}

// watchLinks lists the interfaces and follows their changes; poke is
// called when one appears or goes, and appeared (in a goroutine of its
// own) with each new one.
func watchLinks(run *nsexec.Runner, poke func(), appeared func(linkInfo), logger *log.Entry) (*linkWatch, error) {
	opts := netlink.LinkSubscribeOptions{ErrorCallback: func(err error) {}}
	if ns := run.Handle(); ns >= 0 {
		opts.Namespace = &ns
	}
	h, err := run.Netlink()
	if err != nil {
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	w := &linkWatch{byName: map[string]linkInfo{}, h: h, done: make(chan struct{}), stopped: make(chan struct{})}
	ch := make(chan netlink.LinkUpdate, 4096)
	opts.ErrorCallback = func(err error) {
		// Lost events (a full socket buffer): list again.
		w.mu.Lock()
		w.relist = true
		w.mu.Unlock()
		logger.WithError(err).Debug("Link updates lost: listing the interfaces again")
		poke()
	}
	if err := netlink.LinkSubscribeWithOptions(ch, w.done, opts); err != nil {
		h.Close()
		return nil, fmt.Errorf("following the interfaces: %w", err)
	}
	if err := w.list(); err != nil {
		close(w.done)
		h.Close()
		return nil, err
	}
	go func() {
		defer close(w.stopped)
		for {
			w.follow(ch, poke, appeared)
			// The subscription ends with its socket's first error (a
			// full buffer on a busy node): felix then saw no interface
			// come or go again (a new pod's never programmed). Follow
			// them again and list them (what came between was lost).
			if ch = w.resubscribe(opts, logger); ch == nil {
				return
			}
			w.mu.Lock()
			w.relist = true
			w.mu.Unlock()
			poke()
		}
	}()
	return w, nil
}

// resubscribe follows the interfaces again after the subscription
// ended, retrying until it works or the watch is closed (nil then).
func (w *linkWatch) resubscribe(opts netlink.LinkSubscribeOptions, logger *log.Entry) chan netlink.LinkUpdate {
	for {
		select {
		case <-w.done:
			return nil
		default:
		}
		ch := make(chan netlink.LinkUpdate, 4096)
		err := netlink.LinkSubscribeWithOptions(ch, w.done, opts)
		if err == nil {
			logger.Info("Following the interfaces again (their updates' subscription ended)")
			return ch
		}
		logger.WithError(err).Warn("Cannot follow the interfaces again; retrying")
		select {
		case <-w.done:
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// follow applies link updates until the subscription's channel closes.
func (w *linkWatch) follow(ch chan netlink.LinkUpdate, poke func(), appeared func(linkInfo)) {
	for u := range ch {
		a := u.Link.Attrs()
		w.mu.Lock()
		old, had := w.byName[a.Name]
		if u.Header.Type == 17 /* RTM_DELLINK */ {
			if had && old.index == a.Index {
				delete(w.byName, a.Name)
			}
		} else {
			w.byName[a.Name] = linkInfoOf(u.Link)
		}
		w.mu.Unlock()
		if u.Header.Type != 17 && (!had || old.index != a.Index) {
			go appeared(linkInfoOf(u.Link))
		}
		if !had || old.index != a.Index || u.Header.Type == 17 {
			poke()
		}
	}
}

func (w *linkWatch) list() error {
	links, err := w.h.LinkList()
	if err != nil {
		return fmt.Errorf("listing interfaces: %w", err)
	}
	byName := make(map[string]linkInfo, len(links))
	for _, l := range links {
		byName[l.Attrs().Name] = linkInfoOf(l)
	}
	w.mu.Lock()
	w.byName, w.relist = byName, false
	w.mu.Unlock()
	return nil
}

// snapshotInto fills out (emptied first) with the interfaces by name.
func (w *linkWatch) snapshotInto(out map[string]linkInfo) error {
	w.mu.Lock()
	relist := w.relist
	w.mu.Unlock()
	if relist {
		if err := w.list(); err != nil {
			return err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(out)
	for k, v := range w.byName {
		out[k] = v
	}
	return nil
}

func (w *linkWatch) close() {
	close(w.done)
	<-w.stopped
	w.h.Close()
}

// ifaceWant is what an interface should have: its entry, the entry
// programs of its kind (0 workload, 1 host), its allowed sources.
type ifaceWant struct {
	name string
	kind int
	ep   palbpf.Endpoint
	srcs map[palbpf.SrcKey]struct{}
	// workload: a workload interface, whose device group says its hooks
	// are attached (group is the one it has now).
	workload bool
	group    uint32
}

// ifaceState writes interfaces' entries, sources and attachments, and
// reads them back at start.
type ifaceState struct {
	objs *palbpf.Objects
	log  *log.Entry
	att  *attacher
	eps  map[uint32]palbpf.Endpoint
	srcs map[uint32]map[palbpf.SrcKey]struct{}
	// gone are interfaces removed since the last purge of their
	// conntrack entries and counters.
	gone map[uint32]bool
	// applied is what apply last wrote per interface: an interface whose
	// want is the same costs nothing.
	applied map[int]ifaceWant
}

func newIfaceState(objs *palbpf.Objects, att *attacher, logger *log.Entry) (*ifaceState, error) {
	s := &ifaceState{objs: objs, log: logger, att: att, applied: map[int]ifaceWant{}, eps: map[uint32]palbpf.Endpoint{}, srcs: map[uint32]map[palbpf.SrcKey]struct{}{}, gone: map[uint32]bool{}}
	if err := att.load(objs); err != nil {
		return nil, err
	}
	var idx uint32
	var ep palbpf.Endpoint
	it := objs.Maps[palbpf.MapEndpoint].Iterate()
	for it.Next(&idx, &ep) {
		s.eps[idx] = ep
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", palbpf.MapEndpoint, err)
	}
	var k palbpf.SrcKey
	var v uint8
	it = objs.Maps[palbpf.MapSrc].Iterate()
	for it.Next(&k, &v) {
		if s.srcs[k.Ifindex] == nil {
			s.srcs[k.Ifindex] = map[palbpf.SrcKey]struct{}{}
		}
		s.srcs[k.Ifindex][k] = struct{}{}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", palbpf.MapSrc, err)
	}
	return s, nil
}

// usedSlots are the program slots the kernel's entries name.
func (s *ifaceState) usedSlots() map[uint32]bool {
	used := map[uint32]bool{}
	for _, ep := range s.eps {
		for _, slot := range ep.Slots {
			if slot != 0 {
				used[slot] = true
			}
		}
	}
	return used
}

// apply makes the kernel hold want: for each interface its sources, then
// its entry, then its attachments (so an attached program always finds
// what it needs); interfaces no longer wanted lose their attachments
// first, then the rest.
func (s *ifaceState) apply(want map[int]ifaceWant) error {
	var errs []error
	epMap, srcMap := s.objs.Maps[palbpf.MapEndpoint], s.objs.Maps[palbpf.MapSrc]
	attach := map[int]int{}
	for idx, w := range want {
		if s.unchanged(idx, w) {
			continue
		}
		// Not applied until all of it is (its route and status wait).
		delete(s.applied, idx)
		i := uint32(idx)
		have := s.srcs[i]
		if have == nil {
			have = map[palbpf.SrcKey]struct{}{}
			s.srcs[i] = have
		}
		for k := range w.srcs {
			if _, ok := have[k]; ok {
				continue
			}
			if err := srcMap.Put(k, uint8(1)); err != nil {
				errs = append(errs, fmt.Errorf("source of %s: %w", w.name, err))
				continue
			}
			have[k] = struct{}{}
		}
		if cur, ok := s.eps[i]; !ok || cur != w.ep {
			if err := epMap.Put(i, w.ep); err != nil {
				errs = append(errs, fmt.Errorf("entry of %s: %w", w.name, err))
				continue
			}
			s.eps[i] = w.ep
		}
		attach[idx] = w.kind
	}
	// The attachments, in parallel; then sources no longer wanted.
	errs = append(errs, s.att.ensureAll(attach)...)
	for idx := range attach {
		w := want[idx]
		if !s.att.has(idx, w.kind) {
			continue
		}
		if w.workload && w.group != palbpf.AttachedGroup {
			// The attacher sets it after attaching; this repairs one
			// changed by hand.
			if err := s.att.markAttached(idx); err != nil {
				errs = append(errs, fmt.Errorf("device group of %s: %w", w.name, err))
				continue
			}
		}
		have := s.srcs[uint32(idx)]
		for k := range have {
			if _, ok := w.srcs[k]; ok {
				continue
			}
			if err := srcMap.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
				continue
			}
			delete(have, k)
		}
		s.applied[idx] = w
	}
	for idx := range s.applied {
		if _, ok := want[idx]; !ok {
			delete(s.applied, idx)
		}
	}
	errs = append(errs, s.att.detachOthers(func(idx int) bool { _, ok := want[idx]; return ok })...)
	for i := range s.eps {
		if _, ok := want[int(i)]; ok {
			continue
		}
		if s.att.attached(int(i)) {
			continue
		}
		if err := epMap.Delete(i); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
			continue
		}
		delete(s.eps, i)
		s.gone[i] = true
	}
	for i, keys := range s.srcs {
		if _, ok := want[int(i)]; ok {
			continue
		}
		for k := range keys {
			if err := srcMap.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
				continue
			}
			delete(keys, k)
		}
		if len(keys) == 0 {
			delete(s.srcs, i)
		}
	}
	return errors.Join(errs...)
}

// unchanged reports whether an interface already holds want: the same
// entry and sources written, both hooks attached to its kind's program.
func (s *ifaceState) unchanged(idx int, w ifaceWant) bool {
	last, ok := s.applied[idx]
	if !ok || last.ep != w.ep || last.kind != w.kind || len(last.srcs) != len(w.srcs) {
		return false
	}
	if w.workload && w.group != palbpf.AttachedGroup {
		return false
	}
	for k := range w.srcs {
		if _, ok := last.srcs[k]; !ok {
			return false
		}
	}
	return s.att.has(idx, w.kind)
}

// groupSetter sets interfaces' device groups in the node's namespace,
// on a netlink handle of its own.
type groupSetter struct {
	mu sync.Mutex
	h  *netlink.Handle
}

func newGroupSetter(run *nsexec.Runner) (*groupSetter, error) {
	h, err := run.Netlink()
	if err != nil {
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	return &groupSetter{h: h}, nil
}

// set gives interface idx the device group (one RTM_SETLINK; setting the
// group it has changes nothing).
func (g *groupSetter) set(idx int, group uint32) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.h.LinkSetGroup(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: idx}}, int(group))
}

func (g *groupSetter) close() { g.h.Close() }
