package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Hook is where on an interface a program is attached.
type Hook int

// Hooks: In is TCX ingress (packets arriving), Out TCX egress.
const (
	In Hook = iota
	Out
)

func (h Hook) String() string {
	if h == In {
		return "in"
	}
	return "out"
}

func (h Hook) attachType() ebpf.AttachType {
	if h == In {
		return ebpf.AttachTCXIngress
	}
	return ebpf.AttachTCXEgress
}

// Attachment is one of our TCX links, pinned in Dir/links.
type Attachment struct {
	Ifindex int
	Hook    Hook
	// Program is the ID of the attached program.
	Program ebpf.ProgramID
	link    link.Link
	pin     string
}

func (o *Objects) linkPin(ifindex int, h Hook) string {
	return filepath.Join(o.Dir, "links", fmt.Sprintf("%d-%s", ifindex, h))
}

// Links reads back every pinned link. A link whose interface is gone is
// unpinned and left out.
func (o *Objects) Links() (map[[2]int]*Attachment, error) {
	dir := filepath.Join(o.Dir, "links")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("bpf: reading %s: %w", dir, err)
	}
	out := map[[2]int]*Attachment{}
	for _, e := range entries {
		idx, hook, ok := parseLinkPin(e.Name())
		path := filepath.Join(dir, e.Name())
		if !ok {
			continue
		}
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			_ = os.Remove(path)
			continue
		}
		info, err := l.Info()
		tcx := (*link.TCXInfo)(nil)
		if err == nil {
			tcx = info.TCX()
		}
		if err != nil || tcx == nil || int(tcx.Ifindex) != idx {
			// Detached: its interface is gone.
			_ = l.Unpin()
			l.Close()
			continue
		}
		out[[2]int{idx, int(hook)}] = &Attachment{Ifindex: idx, Hook: hook, Program: info.Program, link: l, pin: path}
	}
	return out, nil
}

func parseLinkPin(name string) (int, Hook, bool) {
	idx, h, ok := strings.Cut(name, "-")
	if !ok {
		return 0, 0, false
	}
	i, err := strconv.Atoi(idx)
	if err != nil {
		return 0, 0, false
	}
	switch h {
	case "in":
		return i, In, true
	case "out":
		return i, Out, true
	}
	return 0, 0, false
}

// Attach attaches the entry program of a kind (0 workload, 1 host) to an
// interface's hook, first among the TCX programs, and pins the link; an
// existing attachment of ours is updated in place (atomically: no packet
// sees neither program).
func (o *Objects) Attach(a *Attachment, ifindex int, h Hook, kind int) (*Attachment, error) {
	prog, id := o.Entry[kind][h], o.EntryID[kind][h]
	if a != nil {
		if a.Program == id {
			return a, nil
		}
		if err := a.link.Update(prog); err != nil {
			return nil, fmt.Errorf("bpf: updating the %s program of interface %d: %w", h, ifindex, err)
		}
		a.Program = id
		return a, nil
	}
	var l link.Link
	attach := func() error {
		var err error
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: h.attachType(), Anchor: link.Head()})
		return err
	}
	if err := o.ns.Do(attach); err != nil {
		return nil, fmt.Errorf("bpf: attaching to the %s hook of interface %d: %w", h, ifindex, err)
	}
	pin := o.linkPin(ifindex, h)
	_ = os.Remove(pin)
	if err := l.Pin(pin); err != nil {
		l.Close()
		return nil, fmt.Errorf("bpf: pinning the link of interface %d: %w", ifindex, err)
	}
	return &Attachment{Ifindex: ifindex, Hook: h, Program: id, link: l, pin: pin}, nil
}

// Detach removes an attachment (nothing when its interface is gone).
func (a *Attachment) Detach() error {
	err := a.link.Detach()
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	_ = a.link.Unpin()
	a.link.Close()
	return err
}

// Close releases the handle; the pinned link stays.
func (a *Attachment) Close() { a.link.Close() }

// RemoveAll detaches every program of ours in the namespace and removes
// its directory (maps, links) and the node port tunnel's device: what the
// iptables dataplane does when it takes a node over.
func RemoveAll(root string, ns NetNS) error {
	if root == "" {
		root = DefaultRoot
	}
	id, err := NamespaceID(ns)
	if err != nil {
		return err
	}
	if ns == nil {
		ns = currentNS{}
	}
	return errors.Join(removeAllTC(ns), RemoveDir(filepath.Join(root, id), ns), removeTunnel(ns))
}

// RemoveDir detaches the pinned links of a namespace's directory, then,
// with ns (the namespace it programs), forgets the host conntrack entries
// of the flows its programs may have bypassed (ForgetBypassedFlows), and
// removes it.
func RemoveDir(dir string, ns NetNS) error {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	var errs []error
	links := filepath.Join(dir, "links")
	entries, _ := os.ReadDir(links)
	for _, e := range entries {
		path := filepath.Join(links, e.Name())
		if l, err := link.LoadPinnedLink(path, nil); err == nil {
			if err := l.Detach(); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("bpf: detaching %s: %w", path, err))
			}
			l.Close()
		}
	}
	if ns != nil {
		if err := forgetInDir(dir, ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("bpf: removing %s: %w", dir, err))
	}
	return errors.Join(errs...)
}
