package bpf

import (
	"errors"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	palbpf "github.com/palisade-net/palisade/bpf"
)

// attachParallel bounds the attachments made at once.
const attachParallel = 32

// attacher owns the attachments of the entry programs: TCX links (pinned),
// or, with FelixConfiguration bpfAttachType TC, cls_bpf filters under a
// clsact qdisc (palbpf.AttachTC). A TCX attachment waits for an RCU grace
// period while it holds the rtnl lock (tens of ms on a busy machine, per
// hook), so they are made in parallel (the waits overlap), and a new
// workload interface is attached, blocked, from the link watcher as soon
// as it appears rather than by the next apply: by the time its endpoint
// arrives, only its entry changes. A cls_bpf filter attaches in a
// fraction of a millisecond. An apply does not wait for an attachment
// the watcher has under way (its endpoint's entry and IP set members are
// written meanwhile, its route held back); done is called when it ends.
type attacher struct {
	mu   sync.Mutex
	objs *palbpf.Objects
	att  map[[2]int]*palbpf.Attachment
	// tc are the interfaces whose entry programs run as our cls_bpf
	// filters: the programs' IDs by hook.
	tc map[int][2]ebpf.ProgramID
	// useTC: bpfAttachType is TC.
	useTC bool
	// noTCX: the kernel has no TCX (or featureDetectOverride says
	// TCX=false): every attachment is a cls_bpf filter.
	noTCX bool
	busy  map[int]chan struct{}
	// failed are background attachments that failed, until the next
	// apply reports them.
	failed map[int]error
	// prefixes are the workload interface prefixes (for the watcher).
	prefixes []string
	done     func()
	// setGroup gives an interface a device group (netlink, in the
	// node's namespace).
	setGroup func(idx int, group uint32) error
	// rcu expedites the kernel's grace periods while fresh TCX links are
	// made (bpfExpediteAttach).
	rcu *rcuScope
}

func newAttacher(done func(), setGroup func(idx int, group uint32) error, rcu *rcuScope) *attacher {
	return &attacher{att: map[[2]int]*palbpf.Attachment{}, tc: map[int][2]ebpf.ProgramID{}, busy: map[int]chan struct{}{},
		failed: map[int]error{}, done: done, setGroup: setGroup, rcu: rcu}
}

// markAttached gives a workload interface whose hooks are attached the
// device group that opens the iptables guard of traffic to it.
func (a *attacher) markAttached(idx int) error {
	if a.setGroup == nil {
		return nil
	}
	return a.setGroup(idx, palbpf.AttachedGroup)
}

// setTC chooses the attachment: cls_bpf filters (tc, bpfAttachType TC)
// or TCX links, and cls_bpf filters for every interface, data interfaces
// included, when the kernel has no TCX. An interface attached the other
// way is attached again, and its old attachment removed, at the next
// apply.
func (a *attacher) setTC(tc, tcx bool) {
	a.mu.Lock()
	a.useTC, a.noTCX = tc, !tcx
	a.mu.Unlock()
}

// errBusy: the interface's attachment is under way elsewhere.
var errBusy = errors.New("attachment under way")

// load takes the attachments pinned in the kernel (at start and on every
// read back), closing the handles it had.
func (a *attacher) load(objs *palbpf.Objects) error {
	att, err := objs.Links()
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.att {
		x.Close()
	}
	a.objs, a.att = objs, att
	// Interfaces on cls_bpf filters keep them only while the filters are
	// there (read back, like the links).
	for idx, ids := range a.tc {
		if got, err := objs.TCPrograms(idx); err != nil || got != ids {
			delete(a.tc, idx)
		}
	}
	return nil
}

func (a *attacher) setPrefixes(p []string) {
	a.mu.Lock()
	a.prefixes = append([]string(nil), p...)
	a.mu.Unlock()
}

func (a *attacher) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.att {
		x.Close()
	}
	a.att = map[[2]int]*palbpf.Attachment{}
	a.objs = nil
}

// has reports whether the hooks of an interface run the entry programs
// of kind, attached the way bpfAttachType says (a data interface's with
// TCX whatever it says, when the kernel has TCX).
func (a *attacher) has(idx, kind int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hasLocked(idx, kind)
}

func (a *attacher) hasLocked(idx, kind int) bool {
	if a.objs == nil {
		return false
	}
	if a.tcFor(kind) {
		ids, ok := a.tc[idx]
		return ok && ids == a.objs.EntryID[kind]
	}
	return a.hasTCXLocked(idx, kind)
}

// tcFor reports whether kind's programs are attached as cls_bpf filters:
// with bpfAttachType TC, but for a data interface's and the tunnel
// device's (TCX, which leaves the host's qdiscs alone); every kind's on a
// kernel without TCX.
func (a *attacher) tcFor(kind int) bool {
	return a.noTCX || (a.useTC && kind != palbpf.KindData && kind != palbpf.KindTunnel)
}

// hasTCXLocked reports whether kind's hooks' TCX links run its entry
// programs.
func (a *attacher) hasTCXLocked(idx, kind int) bool {
	for _, h := range palbpf.KindHooks(kind) {
		x := a.att[[2]int{idx, int(h)}]
		if x == nil || x.Program != a.objs.EntryID[kind][h] {
			return false
		}
	}
	if kind == palbpf.KindTunnel && a.att[[2]int{idx, int(palbpf.Out)}] != nil {
		return false // left by what the interface was before
	}
	return true
}

// claim makes the caller the only one attaching to an interface: it
// returns the objects and a release func, or ok false when the interface
// already has kind's programs or, with nowait, errBusy while another
// attachment of it is under way.
func (a *attacher) claim(idx, kind int, nowait bool) (objs *palbpf.Objects, release func(), ok bool, err error) {
	for {
		a.mu.Lock()
		if a.objs == nil {
			a.mu.Unlock()
			return nil, nil, false, errors.New("eBPF objects not open")
		}
		if a.hasLocked(idx, kind) {
			a.mu.Unlock()
			return nil, nil, false, nil
		}
		if ch, busy := a.busy[idx]; busy {
			a.mu.Unlock()
			if nowait {
				return nil, nil, false, errBusy
			}
			<-ch
			continue
		}
		ch := make(chan struct{})
		a.busy[idx] = ch
		objs := a.objs
		a.mu.Unlock()
		return objs, func() {
			a.mu.Lock()
			if a.busy[idx] == ch {
				delete(a.busy, idx)
			}
			close(ch)
			a.mu.Unlock()
		}, true, nil
	}
}

// ensure attaches (or updates) both hooks of an interface to kind's
// entry programs, the way bpfAttachType says, waiting for an attachment
// of it already under way (errBusy at once instead when nowait); the
// attachment of the other way, if any (left by a felix configured
// otherwise), goes once the new one is in place.
func (a *attacher) ensure(idx, kind int, nowait bool) error {
	objs, release, ok, err := a.claim(idx, kind, nowait)
	if !ok {
		return err
	}
	defer release()
	a.mu.Lock()
	useTC := a.tcFor(kind)
	a.mu.Unlock()
	if useTC {
		err = a.attachTC(objs, idx, kind)
	} else {
		err = a.attachTCX(objs, idx, kind)
	}
	if err == nil && kind == 0 {
		err = a.markAttached(idx)
	}
	return err
}

// attachTCX attaches kind's hooks with TCX (the caller holds the claim),
// then removes our cls_bpf filters of the interface.
func (a *attacher) attachTCX(objs *palbpf.Objects, idx, kind int) error {
	a.mu.Lock()
	cur := [2]*palbpf.Attachment{a.att[[2]int{idx, 0}], a.att[[2]int{idx, 1}]}
	a.mu.Unlock()
	// A new link waits for an RCU grace period under the rtnl lock (one
	// updated in place does not): expedited while ours are made.
	for _, h := range palbpf.KindHooks(kind) {
		if cur[h] == nil && a.rcu != nil {
			a.rcu.enter()
			defer a.rcu.exit()
			break
		}
	}
	var got [2]*palbpf.Attachment
	var errs [2]error
	var wg sync.WaitGroup
	for _, h := range palbpf.KindHooks(kind) {
		wg.Go(func() { got[h], errs[h] = objs.Attach(cur[h], idx, h, kind) })
	}
	wg.Wait()
	a.mu.Lock()
	for h, x := range got {
		if x != nil {
			a.att[[2]int{idx, h}] = x
		}
	}
	linked := errs[0] == nil && errs[1] == nil
	// A hook the kind has no program for (the tunnel device's out) loses
	// the one it had.
	var stale *palbpf.Attachment
	if kind == palbpf.KindTunnel && linked {
		stale = a.att[[2]int{idx, int(palbpf.Out)}]
		delete(a.att, [2]int{idx, int(palbpf.Out)})
	}
	a.mu.Unlock()
	if !linked {
		return errors.Join(errs[0], errs[1])
	}
	if stale != nil {
		if err := stale.Detach(); err != nil {
			return err
		}
	}
	// Filters of ours left from bpfAttachType TC or a kernel without TCX
	// (featureDetectOverride), a data interface's included.
	if cur[0] == nil || cur[1] == nil {
		if err := objs.DetachTC(idx, false); err != nil {
			return err
		}
	}
	a.mu.Lock()
	delete(a.tc, idx)
	a.mu.Unlock()
	return nil
}

// attachTC puts the filters on (the caller holds the claim), then
// removes the interface's TCX links.
func (a *attacher) attachTC(objs *palbpf.Objects, idx, kind int) error {
	if err := objs.AttachTC(idx, kind); err != nil {
		return err
	}
	a.mu.Lock()
	a.tc[idx] = objs.EntryID[kind]
	var links []*palbpf.Attachment
	for h := range 2 {
		if x := a.att[[2]int{idx, h}]; x != nil {
			links = append(links, x)
			delete(a.att, [2]int{idx, h})
		}
	}
	a.mu.Unlock()
	var errs []error
	for _, x := range links {
		if err := x.Detach(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ensureAll attaches many interfaces (ifindex → kind) in parallel. An
// interface whose attachment is under way (the watcher's) is left to it.
// A fresh TCX attachment (an interface with no link yet) is not waited
// for either: it waits for RCU grace periods under the rtnl lock, tens of
// ms, which would hold the main loop and every endpoint behind it; it is
// made in the background, like the watcher's, and done is called when it
// ends (the interface's route and status wait for it). Updating links in
// place, and cls_bpf filters, cost a fraction of a millisecond: those are
// made here.
func (a *attacher) ensureAll(want map[int]int) []error {
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, attachParallel)
	var wg sync.WaitGroup
	for idx, kind := range want {
		if later, err := a.attachLater(idx, kind); later {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := a.ensure(idx, kind, true); err != nil && !errors.Is(err, errBusy) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

// attachLater starts a fresh TCX attachment of an interface in the
// background, and reports whether it did (or one is under way already).
// A background attachment that failed is reported by the next call, which
// does not start another: the apply fails, and the main loop's backoff
// paces the retries.
func (a *attacher) attachLater(idx, kind int) (bool, error) {
	a.mu.Lock()
	fresh := !a.tcFor(kind) && a.objs != nil && a.att[[2]int{idx, 0}] == nil && a.att[[2]int{idx, 1}] == nil
	_, busy := a.busy[idx]
	failed := a.failed[idx]
	delete(a.failed, idx)
	a.mu.Unlock()
	switch {
	case failed != nil:
		return true, failed
	case busy:
		return true, nil
	case !fresh:
		return false, nil
	}
	objs, release, ok, err := a.claim(idx, kind, true)
	if !ok {
		return errors.Is(err, errBusy), nil
	}
	go func() {
		err := a.attachTCX(objs, idx, kind)
		if err == nil && kind == 0 {
			err = a.markAttached(idx)
		}
		if err != nil {
			a.mu.Lock()
			a.failed[idx] = err
			a.mu.Unlock()
		}
		release()
		if a.done != nil {
			a.done()
		}
	}()
	return true, nil
}

// detachOthers detaches every attachment of an interface not in keep.
func (a *attacher) detachOthers(keep func(idx int) bool) []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for idx := range a.tc {
		if keep(idx) || a.busy[idx] != nil {
			continue
		}
		if err := a.objs.DetachTC(idx, true); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(a.tc, idx)
	}
	for key, x := range a.att {
		if keep(key[0]) || a.busy[key[0]] != nil {
			continue
		}
		if err := x.Detach(); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(a.att, key)
	}
	return errs
}

// pending reports whether an attachment is under way.
func (a *attacher) pending() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.busy) > 0
}

// attached reports whether an interface has an attachment of ours.
func (a *attacher) attached(idx int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, onTC := a.tc[idx]
	return onTC || a.att[[2]int{idx, 0}] != nil || a.att[[2]int{idx, 1}] != nil
}

// preattach blocks a new workload interface at once: an entry that drops
// everything (unless one is there already), then the entry programs.
func (a *attacher) preattach(li linkInfo) {
	a.mu.Lock()
	objs := a.objs
	ours := false
	for _, p := range a.prefixes {
		ours = ours || strings.HasPrefix(li.name, p)
	}
	a.mu.Unlock()
	if objs == nil || !ours {
		return
	}
	ep := palbpf.Endpoint{Flags: palbpf.EndpointBlocked, L2len: li.l2}
	if err := objs.Maps[palbpf.MapEndpoint].Update(uint32(li.index), ep, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return
	}
	_ = a.ensure(li.index, 0, false)
	if a.done != nil {
		a.done()
	}
}
