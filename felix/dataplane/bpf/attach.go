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

// attacher owns the TCX attachments. Each attachment waits for an RCU
// grace period in the kernel (tens of ms on a busy machine), so they are
// made in parallel (the waits overlap), and a new workload interface is
// attached, blocked, from the link watcher as soon as it appears rather
// than by the next apply: by the time its endpoint arrives, only its
// entry changes. An apply does not wait for an attachment the watcher has
// under way (its endpoint's entry and IP set members are written
// meanwhile, its route held back); done is called when it ends.
type attacher struct {
	mu   sync.Mutex
	objs *palbpf.Objects
	att  map[[2]int]*palbpf.Attachment
	busy map[int]chan struct{}
	// prefixes are the workload interface prefixes (for the watcher).
	prefixes []string
	done     func()
}

func newAttacher(done func()) *attacher {
	return &attacher{att: map[[2]int]*palbpf.Attachment{}, busy: map[int]chan struct{}{}, done: done}
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

// has reports whether both hooks of an interface run the entry programs
// of kind.
func (a *attacher) has(idx, kind int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hasLocked(idx, kind)
}

func (a *attacher) hasLocked(idx, kind int) bool {
	for _, h := range []palbpf.Hook{palbpf.In, palbpf.Out} {
		x := a.att[[2]int{idx, int(h)}]
		if x == nil || a.objs == nil || x.Program != a.objs.EntryID[kind][h] {
			return false
		}
	}
	return true
}

// ensure attaches (or updates) both hooks of an interface to kind's
// entry programs, waiting for an attachment of it already under way
// (errBusy at once instead when nowait).
func (a *attacher) ensure(idx, kind int, nowait bool) error {
	for {
		a.mu.Lock()
		if a.objs == nil {
			a.mu.Unlock()
			return errors.New("eBPF objects not open")
		}
		if a.hasLocked(idx, kind) {
			a.mu.Unlock()
			return nil
		}
		if ch, ok := a.busy[idx]; ok {
			a.mu.Unlock()
			if nowait {
				return errBusy
			}
			<-ch
			continue
		}
		ch := make(chan struct{})
		a.busy[idx] = ch
		objs := a.objs
		cur := [2]*palbpf.Attachment{a.att[[2]int{idx, 0}], a.att[[2]int{idx, 1}]}
		a.mu.Unlock()

		var got [2]*palbpf.Attachment
		var errs [2]error
		var wg sync.WaitGroup
		for _, h := range []palbpf.Hook{palbpf.In, palbpf.Out} {
			wg.Go(func() { got[h], errs[h] = objs.Attach(cur[h], idx, h, kind) })
		}
		wg.Wait()
		a.mu.Lock()
		for h, x := range got {
			if x != nil {
				a.att[[2]int{idx, h}] = x
			}
		}
		delete(a.busy, idx)
		close(ch)
		a.mu.Unlock()
		return errors.Join(errs[0], errs[1])
	}
}

// ensureAll attaches many interfaces (ifindex → kind) in parallel. An
// interface whose attachment is under way (the watcher's) is left to it.
func (a *attacher) ensureAll(want map[int]int) []error {
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, attachParallel)
	var wg sync.WaitGroup
	for idx, kind := range want {
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

// detachOthers detaches every attachment of an interface not in keep.
func (a *attacher) detachOthers(keep func(idx int) bool) []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
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

// attached reports whether an interface has an attachment of ours.
func (a *attacher) attached(idx int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.att[[2]int{idx, 0}] != nil || a.att[[2]int{idx, 1}] != nil
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
