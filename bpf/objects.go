package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// DefaultRoot is the bpffs directory holding one directory per network
// namespace that felix programs ("ns<cookie>").
const DefaultRoot = "/sys/fs/bpf/palisade"

// bpffsMount is where bpffs is mounted when absent.
const bpffsMount = "/sys/fs/bpf"

// NetNS runs work in the network namespace being programmed (attaching by
// interface index and reading the namespace's cookie need it).
// *nsexec.Runner is one.
type NetNS interface {
	Do(func() error) error
}

// Timeouts are the conntrack timeouts; zero fields keep the defaults.
type Timeouts struct {
	TCPSynSent, TCPEstablished, TCPFinsSeen, TCPResetSeen time.Duration
	UDP, ICMP, Other, Fragment                            time.Duration
}

// Options configure Open.
type Options struct {
	// Root is the bpffs directory of the namespaces' directories
	// (DefaultRoot when empty).
	Root string
	// NS is the namespace; nil means the current one.
	NS NetNS
	// ConntrackEntries is the conntrack map's size (FelixConfiguration
	// bpfMapSizeConntrack; 0 for 512,000).
	ConntrackEntries int
	// IPSetEntries is the IP set map's size (bpfMapSizeIPSets; 0 for
	// 4,194,304).
	IPSetEntries int
	// MaglevEntries is the Maglev tables' map size
	// (bpfMaglevMaxServices tables; 0 for 1,048,576).
	MaglevEntries int
	// NATFrontendEntries, NATBackendEntries and NATAffinityEntries are
	// the sizes of the frontends', backends' and affinities' maps
	// (bpfMapSizeNATFrontend, bpfMapSizeNATBackend,
	// bpfMapSizeNATAffinity; 0 for Calico's defaults, 65,536, 262,144
	// and 65,536).
	NATFrontendEntries, NATBackendEntries, NATAffinityEntries int
	Timeouts                                                  Timeouts
	// NoCounters turns packet counting off (benchmarks measure what
	// counting costs against it; felix always counts).
	NoCounters bool
	// NoLoop loads the object built without the policy engine
	// (-DPAL_NO_LOOP: no bpf_loop call, which a kernel before 5.17
	// refuses); every policy stage must then be a compiled program.
	NoLoop bool
	Log    *log.Entry
}

// Objects are the maps and fixed programs of one namespace.
type Objects struct {
	// Dir is the namespace's directory; MapsDir holds the maps of this
	// build and configuration ("maps-<hash>"); links are pinned in
	// Dir/links.
	Dir, MapsDir string
	Maps         map[string]*ebpf.Map
	// Engine: the programs run the policy engine (the object with
	// bpf_loop; its maps MapPolicy and MapID6 are in Maps). Without,
	// every policy stage is a compiled program.
	Engine bool
	// Entry programs by kind (KindWorkload, KindHost, KindData,
	// KindTunnel) and hook (0 in, 1 out; the tunnel has only in).
	Entry [Kinds][2]*ebpf.Program
	// EntryID are their IDs.
	EntryID [Kinds][2]ebpf.ProgramID
	// Drop drops everything.
	Drop *ebpf.Program
	// Forward is the host conntrack bypass (SlotForward), nil where the
	// kernel cannot load it (ForwardErr says why).
	Forward    *ebpf.Program
	ForwardErr error
	ns         NetNS
	log        *log.Entry
	// verifierLog, when set, logs the verifier's output of policy
	// programs (tests).
	verifierLog ebpf.LogLevel
	// resume programs, held until Close.
	resume []*ebpf.Program
}

type currentNS struct{}

func (currentNS) Do(f func() error) error { return f() }

// Open mounts bpffs if needed, loads or creates the pinned maps of the
// namespace, loads the fixed programs and puts the resume programs in
// their slots. It changes no attachment.
func Open(opts Options) (*Objects, error) {
	if opts.Root == "" {
		opts.Root = DefaultRoot
	}
	if opts.NS == nil {
		opts.NS = currentNS{}
	}
	if opts.Log == nil {
		opts.Log = log.NewEntry(log.StandardLogger())
	}
	if err := MountBPFFS(); err != nil {
		return nil, err
	}
	id, err := NamespaceID(opts.NS)
	if err != nil {
		return nil, err
	}
	spec, err := loadObject(opts.NoLoop)
	if err != nil {
		return nil, fmt.Errorf("bpf: reading the embedded object: %w", err)
	}
	if opts.ConntrackEntries > 0 {
		spec.Maps[MapCT].MaxEntries = uint32(opts.ConntrackEntries)
	}
	if opts.IPSetEntries > 0 {
		spec.Maps[MapSets].MaxEntries = uint32(opts.IPSetEntries)
	}
	for _, m := range []struct {
		n     int
		names []string
	}{{opts.MaglevEntries, []string{MapMaglev}}, {opts.NATFrontendEntries, []string{MapServices}},
		{opts.NATBackendEntries, []string{MapBackends, MapBackendsLive}}, {opts.NATAffinityEntries, []string{MapAffinity}}} {
		if m.n > 0 {
			for _, name := range m.names {
				spec.Maps[name].MaxEntries = uint32(m.n)
			}
		}
	}
	if err := setTimeouts(spec, opts.Timeouts); err != nil {
		return nil, err
	}
	if opts.NoCounters {
		if err := spec.Variables["count_packets"].Set(uint32(0)); err != nil {
			return nil, fmt.Errorf("bpf: turning counting off: %w", err)
		}
	}
	o := &Objects{Dir: filepath.Join(opts.Root, id), Maps: map[string]*ebpf.Map{}, Engine: !opts.NoLoop, ns: opts.NS, log: opts.Log}
	o.MapsDir = filepath.Join(o.Dir, "maps-"+specHash(spec))
	if err := os.MkdirAll(o.MapsDir, 0o700); err != nil {
		return nil, fmt.Errorf("bpf: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "links"), 0o700); err != nil {
		return nil, fmt.Errorf("bpf: %w", err)
	}
	for name, ms := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue // .rodata: per program load
		}
		ms.Pinning = ebpf.PinByName
		m, err := ebpf.NewMapWithOptions(ms, ebpf.MapOptions{PinPath: o.MapsDir})
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("bpf: map %s in %s: %w", name, o.MapsDir, err)
		}
		o.Maps[name] = m
	}
	// The forward programs call nf_conntrack's kfuncs: they are loaded on
	// their own, so a kernel without them still runs everything else.
	fwdSpec := spec.Copy()
	delete(spec.Programs, progForward)
	for name := range fwdSpec.Programs {
		if name != progForward {
			delete(fwdSpec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: o.Maps})
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("bpf: loading the programs: %w", err)
	}
	if fwd, err := ebpf.NewCollectionWithOptions(fwdSpec, ebpf.CollectionOptions{MapReplacements: o.Maps}); err != nil {
		o.ForwardErr = err
	} else {
		o.Forward = fwd.Programs[progForward]
		delete(fwd.Programs, progForward)
		fwd.Close()
	}
	progs := coll.Programs
	coll.Programs = nil
	coll.Close() // the maps stay open in o.Maps; the programs are kept
	o.Entry[KindWorkload] = [2]*ebpf.Program{progs["pal_wl_in"], progs["pal_wl_out"]}
	o.Entry[KindHost] = [2]*ebpf.Program{progs["pal_hep_in"], progs["pal_hep_out"]}
	o.Entry[KindData] = [2]*ebpf.Program{progs["pal_data_in"], progs["pal_data_out"]}
	o.Entry[KindTunnel][In] = progs["pal_tun_in"]
	o.Drop = progs["pal_drop"]
	for k := range o.Entry {
		for h, p := range o.Entry[k] {
			if p == nil {
				continue
			}
			info, err := p.Info()
			if err != nil {
				o.Close()
				return nil, fmt.Errorf("bpf: entry program info: %w", err)
			}
			o.EntryID[k][h], _ = info.ID()
		}
	}
	for _, name := range []string{"pal_resume_wl_in", "pal_resume_wl_out", "pal_resume_hep_in", "pal_resume_hep_out"} {
		o.resume = append(o.resume, progs[name])
	}
	if err := o.UseResume(); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// UseResume puts o's resume programs in their slots of MapProgs (Open
// does; a benchmark that opens the namespace twice, counting and not,
// swaps them with it).
func (o *Objects) UseResume() error {
	for slot, p := range o.resume {
		if err := o.Maps[MapProgs].Put(uint32(slot), uint32(p.FD())); err != nil {
			return fmt.Errorf("bpf: resume program in slot %d: %w", slot, err)
		}
	}
	return nil
}

// progForward is the forward program's name in the object: a
// workload's and a data interface's established packets.
const progForward = "pal_fwd"

// SetForward turns the host conntrack bypass on (the forward program in
// its slot) or off (the slot empty: established packets take the
// kernel's path). It fails when on is asked of a kernel that could not
// load the program.
func (o *Objects) SetForward(on bool) error {
	progs := o.Maps[MapProgs]
	if !on {
		if err := progs.Delete(uint32(SlotForward)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("bpf: emptying the forward slot: %w", err)
		}
		return nil
	}
	if o.Forward == nil {
		return fmt.Errorf("bpf: the forward program is not loaded: %w", o.ForwardErr)
	}
	if err := progs.Put(uint32(SlotForward), uint32(o.Forward.FD())); err != nil {
		return fmt.Errorf("bpf: forward program in slot %d: %w", SlotForward, err)
	}
	return nil
}

// Close releases the handles; everything pinned stays.
func (o *Objects) Close() {
	for _, m := range o.Maps {
		m.Close()
	}
	for _, ps := range o.Entry {
		for _, p := range ps {
			if p != nil {
				p.Close()
			}
		}
	}
	if o.Drop != nil {
		o.Drop.Close()
	}
	if o.Forward != nil {
		o.Forward.Close()
	}
	for _, p := range o.resume {
		p.Close()
	}
}

// LogVerifier makes LoadPolicy log the verifier's statistics.
func (o *Objects) LogVerifier() { o.verifierLog = ebpf.LogLevelStats }

// StaleMapDirs lists the maps directories of other builds or
// configurations; they go once nothing attached uses them.
func (o *Objects) StaleMapDirs() []string {
	entries, _ := os.ReadDir(o.Dir)
	var out []string
	for _, e := range entries {
		p := filepath.Join(o.Dir, e.Name())
		if e.IsDir() && strings.HasPrefix(e.Name(), "maps-") && p != o.MapsDir {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// LoadPolicy loads a generated policy program: its map references are
// resolved to this namespace's maps and info (its description) is bound
// to it in a frozen map, for dumps and for a restarted felix.
func (o *Objects) LoadPolicy(name string, insns asm.Instructions, info []byte) (*ebpf.Program, error) {
	insns = insns[:len(insns):len(insns)]
	cp := make(asm.Instructions, len(insns))
	copy(cp, insns)
	for i := range cp {
		if ref := cp[i].Reference(); ref != "" && cp[i].IsLoadFromMap() {
			m := o.Maps[ref]
			if m == nil {
				return nil, fmt.Errorf("bpf: program %s refers to unknown map %s", name, ref)
			}
			if err := cp[i].AssociateMap(m); err != nil {
				return nil, fmt.Errorf("bpf: program %s: map %s: %w", name, ref, err)
			}
		}
	}
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name: name, Type: ebpf.SchedCLS, License: "Dual MIT/GPL", Instructions: cp,
	}, ebpf.ProgramOptions{LogSizeStart: 1 << 16, LogLevel: o.verifierLog})
	if err != nil {
		return nil, fmt.Errorf("bpf: loading policy program %s: %w", name, err)
	}
	if o.verifierLog != 0 {
		o.log.WithField("program", name).Info(prog.VerifierLog)
	}
	if len(info) > 0 {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "pal_info", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(len(info)), MaxEntries: 1, Flags: unix.BPF_F_RDONLY_PROG})
		if err == nil {
			err = m.Put(uint32(0), info)
		}
		if err == nil {
			err = m.Freeze()
		}
		if err == nil {
			err = prog.BindMap(m)
		}
		if m != nil {
			m.Close()
		}
		if err != nil {
			prog.Close()
			return nil, fmt.Errorf("bpf: description of policy program %s: %w", name, err)
		}
	}
	return prog, nil
}

// ProgramInfo reads back a loaded program's description (LoadPolicy's
// info), nil when it has none.
func ProgramInfo(p *ebpf.Program) ([]byte, error) {
	info, err := p.Info()
	if err != nil {
		return nil, err
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		mi, err := m.Info()
		if err != nil || mi.Name != "pal_info" {
			m.Close()
			continue
		}
		buf := make([]byte, m.ValueSize())
		err = m.Lookup(uint32(0), &buf)
		m.Close()
		return buf, err
	}
	return nil, nil
}

// loadObject reads the embedded object: the one with the policy engine,
// or the one without (noLoop).
func loadObject(noLoop bool) (*ebpf.CollectionSpec, error) {
	if noLoop {
		return loadPalisadeNoLoop()
	}
	return loadPalisade()
}

// engineMaps are the maps only the object with the policy engine has.
var engineMaps = map[string]bool{MapPolicy: true, MapID6: true, "pal_eng": true}

// specHash names the maps directory: the build's objects and the map
// sizes, so a different build or configuration never adopts maps of
// another layout. Both objects of a build share it (their other maps are
// the same), so a felix that starts with the other object keeps the
// conntrack, NAT and counters.
func specHash(spec *ebpf.CollectionSpec) string {
	h := sha256.New()
	h.Write(_PalisadeBytes)
	h.Write(_PalisadeNoLoopBytes)
	names := make([]string, 0, len(spec.Maps))
	for n := range spec.Maps {
		if !engineMaps[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		m := spec.Maps[n]
		fmt.Fprintf(h, "%s %d %d %d %d %d\n", n, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func setTimeouts(spec *ebpf.CollectionSpec, t Timeouts) error {
	for name, d := range map[string]time.Duration{
		"ct_tcp_syn": t.TCPSynSent, "ct_tcp_est": t.TCPEstablished, "ct_tcp_fin": t.TCPFinsSeen, "ct_tcp_rst": t.TCPResetSeen,
		"ct_udp": t.UDP, "ct_icmp": t.ICMP, "ct_other": t.Other, "frag_timeout": t.Fragment,
	} {
		if d <= 0 {
			continue
		}
		v := spec.Variables[name]
		if v == nil {
			return fmt.Errorf("bpf: the object has no variable %s", name)
		}
		if err := v.Set(uint64(d.Nanoseconds())); err != nil {
			return fmt.Errorf("bpf: setting %s: %w", name, err)
		}
	}
	return nil
}

// DefaultTimeouts are the timeouts compiled into the object.
func DefaultTimeouts() (Timeouts, error) {
	spec, err := loadPalisade()
	if err != nil {
		return Timeouts{}, err
	}
	get := func(name string) time.Duration {
		var v uint64
		if vs := spec.Variables[name]; vs != nil {
			_ = vs.Get(&v)
		}
		return time.Duration(v)
	}
	return Timeouts{
		TCPSynSent: get("ct_tcp_syn"), TCPEstablished: get("ct_tcp_est"), TCPFinsSeen: get("ct_tcp_fin"),
		TCPResetSeen: get("ct_tcp_rst"), UDP: get("ct_udp"), ICMP: get("ct_icmp"), Other: get("ct_other"),
		Fragment: get("frag_timeout"),
	}, nil
}

// MountBPFFS mounts bpffs at /sys/fs/bpf when it is not mounted there.
func MountBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs(bpffsMount, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll(bpffsMount, 0o755); err != nil {
		return fmt.Errorf("bpf: %w", err)
	}
	if err := unix.Mount("bpf", bpffsMount, "bpf", 0, "mode=0700"); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("bpf: mounting bpffs at %s: %w", bpffsMount, err)
	}
	return nil
}

// soNetnsCookie is SO_NETNS_COOKIE (Linux 5.14).
const soNetnsCookie = 71

// NamespaceID names the directory of a network namespace: "ns" and its
// cookie, unique for the life of the machine (an inode number is reused).
func NamespaceID(ns NetNS) (string, error) {
	cookie, err := NamespaceCookie(ns)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("ns%d", cookie), nil
}

// NamespaceCookie is the network namespace's cookie (SO_NETNS_COOKIE).
func NamespaceCookie(ns NetNS) (uint64, error) {
	if ns == nil {
		ns = currentNS{}
	}
	var cookie uint64
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, soNetnsCookie)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("bpf: reading the network namespace's cookie: %w", err)
	}
	return cookie, nil
}
