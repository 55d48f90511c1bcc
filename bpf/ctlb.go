package bpf

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// MapCTLB is the connect-time load balancer's own map (c/ctlb.c): per
// socket, the frontend each backend stands for and an unconnected UDP
// socket's backend of each frontend.
const MapCTLB = "pal_ctlb"

// CTLBKey and CTLBValue are pal_ctlb's entries.
type (
	CTLBKey   = ctlbCtlbKey
	CTLBValue = ctlbCtlbValue
)

// ctlbHooks are the connect-time programs and their cgroup hooks.
var ctlbHooks = []struct {
	prog   string
	attach ebpf.AttachType
}{
	{"pal_connect4", ebpf.AttachCGroupInet4Connect},
	{"pal_connect6", ebpf.AttachCGroupInet6Connect},
	{"pal_sendmsg4", ebpf.AttachCGroupUDP4Sendmsg},
	{"pal_sendmsg6", ebpf.AttachCGroupUDP6Sendmsg},
	{"pal_recvmsg4", ebpf.AttachCGroupUDP4Recvmsg},
	{"pal_recvmsg6", ebpf.AttachCGroupUDP6Recvmsg},
	{"pal_getpeername4", ebpf.AttachCgroupInet4GetPeername},
	{"pal_getpeername6", ebpf.AttachCgroupInet6GetPeername},
}

// CTLBHooks is how many hooks the connect-time programs take.
var CTLBHooks = len(ctlbHooks)

// ctlbPin is where a hook's link is pinned: among the TCX links (Links
// skips the name; RemoveDir detaches it with them).
func (o *Objects) ctlbPin(prog string) string {
	return filepath.Join(o.Dir, "links", "ctlb-"+strings.TrimPrefix(prog, "pal_"))
}

// CTLBOptions configure AttachCTLB.
type CTLBOptions struct {
	// Cgroup is the cgroup v2 directory the programs are attached to;
	// felix gives the root of the hierarchy (CgroupRoot), so every
	// process of the machine is under them.
	Cgroup string
	// UDP: UDP sockets are translated too, else only TCP ones.
	UDP bool
}

// AttachCTLB loads the connect-time programs against o's Service maps,
// for the sockets of o's network namespace only, and attaches them to
// opts.Cgroup: links pinned beside the TCX ones, updated in place when
// they are there already (a restarted felix, UDP turned on or off), so
// no connect goes untranslated in between. A link to another cgroup is
// replaced.
func (o *Objects) AttachCTLB(opts CTLBOptions) error {
	spec, err := loadCtlb()
	if err != nil {
		return fmt.Errorf("bpf: reading the connect-time object: %w", err)
	}
	cookie, err := NamespaceCookie(o.ns)
	if err != nil {
		return err
	}
	udp := uint32(0)
	if opts.UDP {
		udp = 1
	}
	if err := spec.Variables["netns_cookie"].Set(cookie); err != nil {
		return fmt.Errorf("bpf: connect-time program: %w", err)
	}
	if err := spec.Variables["ctlb_udp"].Set(udp); err != nil {
		return fmt.Errorf("bpf: connect-time program: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(opts.Cgroup, &st); err != nil {
		return fmt.Errorf("bpf: cgroup %s: %w", opts.Cgroup, err)
	}
	repl := map[string]*ebpf.Map{}
	for name, ms := range spec.Maps {
		if m, ok := o.Maps[name]; ok {
			repl[name] = m
			continue
		}
		if name != MapCTLB {
			continue // .rodata
		}
		ms.Pinning = ebpf.PinByName
		m, err := ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: o.MapsDir})
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			// Another build's layout: its entries are of no use.
			_ = os.Remove(filepath.Join(o.MapsDir, name))
			m, err = ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: o.MapsDir})
		}
		if err != nil {
			return fmt.Errorf("bpf: map %s in %s: %w", name, o.MapsDir, err)
		}
		defer m.Close()
		repl[name] = m
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return fmt.Errorf("bpf: loading the connect-time programs: %w", err)
	}
	defer coll.Close()
	for _, h := range ctlbHooks {
		if err := o.attachCgroup(coll.Programs[h.prog], h.prog, h.attach, opts.Cgroup, st.Ino); err != nil {
			return err
		}
	}
	return nil
}

// attachCgroup attaches or updates one hook's pinned link.
func (o *Objects) attachCgroup(prog *ebpf.Program, name string, at ebpf.AttachType, cgroup string, cgroupID uint64) error {
	pin := o.ctlbPin(name)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		info, err := l.Info()
		if err == nil && info.Cgroup() != nil && info.Cgroup().CgroupId == cgroupID {
			err = l.Update(prog)
			l.Close()
			if err != nil {
				return fmt.Errorf("bpf: updating the %s link: %w", name, err)
			}
			return nil
		}
		// Another cgroup's, or defunct (its cgroup went).
		_ = l.Unpin()
		l.Close()
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroup, Attach: at, Program: prog})
	if err != nil {
		return fmt.Errorf("bpf: attaching %s to cgroup %s: %w", name, cgroup, err)
	}
	defer l.Close()
	_ = os.Remove(pin)
	if err := l.Pin(pin); err != nil {
		_ = l.Close()
		return fmt.Errorf("bpf: pinning the %s link: %w", name, err)
	}
	return nil
}

// DetachCTLB detaches the connect-time programs (nothing when they are
// not attached).
func (o *Objects) DetachCTLB() error {
	var errs []error
	for _, h := range ctlbHooks {
		pin := o.ctlbPin(h.prog)
		l, err := link.LoadPinnedLink(pin, nil)
		if err != nil {
			continue
		}
		if err := l.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("bpf: unpinning %s: %w", pin, err))
		}
		l.Close()
	}
	return errors.Join(errs...)
}

// CTLBAttached says which connect-time hooks have a link of ours (the
// names of their programs).
func (o *Objects) CTLBAttached() []string {
	var out []string
	for _, h := range ctlbHooks {
		if _, err := os.Stat(o.ctlbPin(h.prog)); err == nil {
			out = append(out, h.prog)
		}
	}
	return out
}

// DefaultCgroupMount is where CgroupRoot mounts the cgroup v2 hierarchy
// when it is mounted nowhere (Calico's default cgroupV2Path).
const DefaultCgroupMount = "/run/calico/cgroup"

// CgroupRoot is the cgroup v2 directory the connect-time programs attach
// to. path (FelixConfiguration cgroupV2Path) is used when given: a
// cgroup2 directory as it is, anything else gets the hierarchy mounted
// on it. Without one, the first mount of the hierarchy's root in
// mountinfo (/sys/fs/cgroup on a cgroup v2 machine, /sys/fs/cgroup/unified
// on a hybrid one), else DefaultCgroupMount, mounted.
func CgroupRoot(path, mountinfo string) (string, error) {
	if path == "" {
		if p, err := cgroup2Mount(mountinfo); err != nil || p != "" {
			return p, err
		}
		path = DefaultCgroupMount
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return path, nil
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return "", fmt.Errorf("bpf: cgroup v2 mount point: %w", err)
	}
	if err := unix.Mount("none", path, "cgroup2", 0, ""); err != nil {
		return "", fmt.Errorf("bpf: mounting the cgroup v2 hierarchy on %s: %w", path, err)
	}
	return path, nil
}

// cgroup2Mount finds a mount of the cgroup v2 hierarchy's root in a
// mountinfo file ("" when there is none).
func cgroup2Mount(mountinfo string) (string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return "", fmt.Errorf("bpf: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 1 || tail[0] != "cgroup2" || fields[3] != "/" {
			continue
		}
		return unescapeMount(fields[4]), nil
	}
	return "", sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
