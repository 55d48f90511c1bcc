package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/metrics"
	"github.com/palisade-net/palisade/felix/rules"
)

// ChainPrefix marks the chains felix owns.
const ChainPrefix = rules.ChainPrefix

// Insert modes of the jumps in kernel chains (FelixConfiguration
// chainInsertMode).
const (
	Insert = "Insert"
	Append = "Append"
)

var hashRe = regexp.MustCompile(`--comment "?cali:([A-Za-z0-9_-]{16})"?`)

// kernelRule is one rule of a kernel chain as read back: our hash ("" for
// a rule of another program) and the text after "-A <chain> ".
type kernelRule struct {
	hash string
	spec string
}

// Table is the driver of one table (raw, mangle, nat or filter) of one
// family. Set what is wanted with SetChains and SetJumps (cheap), then
// Apply writes the difference.
//
// Our chains are compared by their list of rule hashes; a chain whose list
// differs is rewritten whole (declared, which flushes it, then appended
// to) in the restore transaction. A rule's hash covers every rule before
// it, so a change anywhere in a chain changes every later hash: per-rule
// edits would save little, and whole-chain rewrites inside one atomic
// transaction never leave a half-written chain visible.
type Table struct {
	Name   string
	family int
	save   string
	restor string
	wait   bool
	run    *nsexec.Runner
	log    *log.Entry

	insertMode string
	desired    map[string][]rules.Rule // our chains
	order      []string
	jumps      map[string][]rules.Rule // kernel chain → our jumps, in order

	// Kernel state: hashes of our chains, and the rules of the kernel
	// chains we jump from.
	kernel        map[string][]string
	kernelChains  map[string][]kernelRule
	needRead      bool
	jumpsVerified bool
	// replaceJumps moves our jumps even where they are present (the
	// insert mode changed).
	replaceJumps bool
	// direct writes nft changes without iptables-nft-restore when it can
	// (nil: legacy backend, or no netlink connection); directWrites
	// counts the changes it wrote.
	direct       *nftDirect
	directWrites int
	// metrics counts restores, saves and netlink writes (nil: none).
	metrics *metrics.Felix
}

// SetMetrics makes the table count its iptables-restore and
// iptables-save runs and its netlink transactions in m.
func (t *Table) SetMetrics(m *metrics.Felix) { t.metrics = m }

// primer is what a waiting iptables-nft-restore is given first (see
// nsexec.Runner.Prime): a transaction of its own in the small raw table
// that adds and removes a chain holding the matches and targets felix's
// rules use most, so the extensions are loaded before an update arrives
// (1–2 ms each on a small VM). Sets are left out: a set match needs an
// existing set.
const primer = `*raw
:cali-primer - [0:0]
-A cali-primer -p tcp -m tcp --dport 1 -m conntrack --ctstate INVALID -m mark --mark 0x1/0x1 -m multiport --destination-ports 1 -m comment --comment primer -j MARK --set-xmark 0x0/0x1
-A cali-primer -j RETURN
-F cali-primer
-X cali-primer
COMMIT
`

// NewTable makes the driver of a table for family 4 or 6 on a backend.
func NewTable(name string, family int, backend Backend, run *nsexec.Runner, logger *log.Entry) *Table {
	save, restore := backend.Commands(family)
	var direct *nftDirect
	if backend != Legacy {
		run.Prime(primer, restore, "--noflush")
		var err error
		if direct, err = newNFTDirect(run, family, name); err != nil {
			logger.WithError(err).Warn("Writing iptables through iptables-nft-restore only")
		}
	}
	return &Table{direct: direct,
		Name: name, family: family, save: save, restor: restore, wait: backend == Legacy, run: run,
		log:        logger.WithFields(log.Fields{"table": name, "ipVersion": family, "backend": backend}),
		insertMode: Insert, desired: map[string][]rules.Rule{}, jumps: map[string][]rules.Rule{},
		kernel: map[string][]string{}, kernelChains: map[string][]kernelRule{}, needRead: true,
	}
}

// SetChains sets every chain felix wants in the table.
func (t *Table) SetChains(chains []rules.Chain) {
	t.desired = make(map[string][]rules.Rule, len(chains))
	t.order = t.order[:0]
	for _, c := range chains {
		t.desired[c.Name] = c.Rules
		t.order = append(t.order, c.Name)
	}
}

// SetJumps sets our rules in kernel chains and how they are placed
// (Insert: first in the chain; Append: anywhere, added at the end).
func (t *Table) SetJumps(jumps []rules.KernelJump, mode string) {
	j := map[string][]rules.Rule{}
	for _, k := range jumps {
		if k.Table == t.Name {
			j[k.Chain] = append(j[k.Chain], k.Rule)
		}
	}
	if mode != Append {
		mode = Insert
	}
	if mode != t.insertMode {
		t.replaceJumps = true
	}
	if t.replaceJumps || !sameJumps(j, t.jumps) {
		t.jumpsVerified = false
	}
	t.jumps, t.insertMode = j, mode
}

func sameJumps(a, b map[string][]rules.Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for c, rs := range a {
		if !slices.EqualFunc(rs, b[c], func(x, y rules.Rule) bool { return x.Hash == y.Hash }) {
			return false
		}
	}
	return true
}

// Invalidate makes the next Apply read the kernel back (the periodic
// refresh that repairs tampering).
func (t *Table) Invalidate() { t.needRead = true }

// NeedsRead reports whether the next Apply reads the kernel back first.
func (t *Table) NeedsRead() bool { return t.needRead }

// Load gives the table its section of an iptables-save of every table
// (see ReadAll), sparing Apply its own read.
func (t *Table) Load(save []byte) {
	t.kernel, t.kernelChains = parseSave(save, t.jumps)
	t.needRead = false
	t.jumpsVerified = false
}

// ReadAll runs one iptables-save of every table of a family and returns
// each table's section, for Table.Load.
func ReadAll(ctx context.Context, run *nsexec.Runner, backend Backend, family int) (map[string][]byte, error) {
	save, _ := backend.Commands(family)
	out, err := run.Run(ctx, "", save)
	if err != nil {
		return nil, fmt.Errorf("reading iptables (IPv%d): %w", family, err)
	}
	sections := map[string][]byte{}
	table := ""
	for _, line := range bytes.SplitAfter(out, []byte("\n")) {
		if len(line) > 1 && line[0] == '*' {
			table = string(bytes.TrimSpace(line[1:]))
		}
		if table != "" {
			sections[table] = append(sections[table], line...)
		}
		if bytes.HasPrefix(line, []byte("COMMIT")) {
			table = ""
		}
	}
	return sections, nil
}

// read loads the kernel's view of the table: our chains' hashes and the
// rules of the kernel chains we jump from.
func (t *Table) read(ctx context.Context) error {
	out, err := t.run.Run(ctx, "", t.save, "-t", t.Name)
	t.metrics.Save(err)
	if err != nil {
		return fmt.Errorf("reading table %s (IPv%d): %w", t.Name, t.family, err)
	}
	t.kernel, t.kernelChains = parseSave(out, t.jumps)
	t.needRead = false
	t.jumpsVerified = false
	return nil
}

// parseSave reads iptables-save output: the hashes of every cali- chain,
// and the rules of the kernel chains listed in jumps.
func parseSave(out []byte, jumps map[string][]rules.Rule) (ours map[string][]string, kernel map[string][]kernelRule) {
	ours, kernel = map[string][]string{}, map[string][]kernelRule{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if strings.HasPrefix(name, ChainPrefix) {
				ours[name] = []string{}
			} else {
				kernel[name] = []kernelRule{}
			}
		case strings.HasPrefix(line, "-A "):
			chain, spec, _ := strings.Cut(line[3:], " ")
			hash := ""
			if m := hashRe.FindStringSubmatch(spec); m != nil {
				hash = m[1]
			}
			if strings.HasPrefix(chain, ChainPrefix) {
				ours[chain] = append(ours[chain], hash)
			} else {
				kernel[chain] = append(kernel[chain], kernelRule{hash: hash, spec: spec})
			}
		}
	}
	return ours, kernel
}

func sameHashes(have []string, want []rules.Rule) bool {
	if len(have) != len(want) {
		return false
	}
	for i, r := range want {
		if have[i] != r.Hash {
			return false
		}
	}
	return true
}

func hashes(rs []rules.Rule) []string {
	h := make([]string, len(rs))
	for i, r := range rs {
		h[i] = r.Hash
	}
	return h
}

// jumpsOK reports whether a kernel chain holds exactly our jumps, placed
// as the insert mode wants.
func (t *Table) jumpsOK(chain string, want []rules.Rule) bool {
	var ours []int
	have := t.kernelChains[chain]
	for i, r := range have {
		if r.hash != "" {
			ours = append(ours, i)
		}
	}
	if len(ours) != len(want) {
		return false
	}
	for k, i := range ours {
		if have[i].hash != want[k].Hash || t.insertMode == Insert && i != k {
			return false
		}
	}
	return true
}

// Apply writes what differs between the wanted table and the kernel. It
// reports whether anything was written.
//
// On the nft backend the chains whose every rule the direct writer can
// encode (endpoint, dispatch and most top-level chains) go over netlink
// in one transaction: cheaper than a process, and with rules shorter
// than iptables-nft-restore's (see nftDirect.encode). On the table's
// first write the rest go first through one iptables-restore --noflush;
// they are new chains, so nothing jumps to them until the netlink
// transaction lands and traffic still meets one change. Our jumps from
// kernel chains (needed on a first write or after tampering) follow last,
// in a restore of their own. Any other change with a chain only restore
// can write is one restore, as on the legacy backend (see split).
func (t *Table) Apply(ctx context.Context) (bool, error) {
	if t.needRead {
		if err := t.read(ctx); err != nil {
			return false, err
		}
	}
	var rewritten, stale []string
	for _, name := range t.order {
		if have, ok := t.kernel[name]; ok && sameHashes(have, t.desired[name]) {
			continue
		}
		rewritten = append(rewritten, name)
	}
	for name := range t.kernel {
		if _, ok := t.desired[name]; !ok {
			stale = append(stale, name)
		}
	}
	slices.Sort(stale)
	fixedJumps, tail := t.jumpFixes()
	if len(rewritten) == 0 && len(stale) == 0 && len(fixedJumps) == 0 {
		t.jumpsVerified = true
		return false, nil
	}
	if direct, viaRestore, ok := t.split(rewritten); ok {
		if len(viaRestore) > 0 {
			if err := t.restore(ctx, viaRestore, nil, ""); err != nil {
				return false, err
			}
			t.wrote(viaRestore, nil, nil)
		}
		directStale := stale
		if len(fixedJumps) > 0 {
			directStale = nil // after the jumps to them are gone
		}
		names := make([]string, len(direct))
		for i, c := range direct {
			names[i] = c.name
		}
		rewritten = names
		err := t.direct.write(direct, directStale)
		t.metrics.Netlink(err)
		if err != nil {
			// Nothing of it was applied (one transaction): restore does it.
			t.log.WithError(err).Warn("Direct nftables write failed; using iptables-nft-restore")
		} else {
			t.directWrites++
			t.wrote(names, directStale, nil)
			t.log.WithFields(log.Fields{"chains": len(direct), "stale": len(directStale), "restored": len(viaRestore), "via": "netlink"}).Debug("Table written")
			if len(fixedJumps) == 0 {
				return true, nil
			}
			rewritten = nil // left for restore: the jumps, then stale chains
		}
	}
	if err := t.restore(ctx, rewritten, stale, tail); err != nil {
		return false, err
	}
	t.wrote(rewritten, stale, fixedJumps)
	t.log.WithFields(log.Fields{"chains": len(rewritten), "stale": len(stale), "jumps": len(fixedJumps)}).Debug("Table written")
	return true, nil
}

// jumpFixes lists the kernel chains whose jumps to our chains are missing,
// stale or misplaced, and the restore lines that fix them: ours deleted,
// then the wanted ones inserted or appended.
func (t *Table) jumpFixes() (fixed []string, tail string) {
	if t.jumpsVerified {
		return nil, ""
	}
	var b strings.Builder
	for _, chain := range slices.Sorted(func(yield func(string) bool) {
		for c := range t.kernelChains {
			if !yield(c) {
				return
			}
		}
		for c := range t.jumps {
			if _, ok := t.kernelChains[c]; !ok && !yield(c) {
				return
			}
		}
	}) {
		want := t.jumps[chain]
		if !t.replaceJumps && t.jumpsOK(chain, want) {
			continue
		}
		fixed = append(fixed, chain)
		for _, r := range t.kernelChains[chain] {
			if r.hash != "" {
				fmt.Fprintf(&b, "-D %s %s\n", chain, r.spec)
			}
		}
		if t.insertMode == Insert {
			for i := len(want) - 1; i >= 0; i-- {
				fmt.Fprintf(&b, "-I %s 1 %s\n", chain, want[i].Text())
			}
		} else {
			for _, r := range want {
				fmt.Fprintf(&b, "-A %s %s\n", chain, r.Text())
			}
		}
	}
	return fixed, b.String()
}

// split divides the chains to rewrite between the direct writer and
// restore. ok is false when they must all go through one restore: no
// direct writer, nothing it can encode, or a chain it cannot encode
// outside the table's first write. On a first write (none of our chains
// in the kernel yet) the restore part is all new chains, so writing it
// apart shows traffic nothing. Later it would: a chain for restore may
// exist already. And every commit that adds rules costs a walk of the
// whole table, so two commits would cost a policy change twice the walk
// of one (a 1,000-endpoint node's p99 went from 35 to 55 ms). A new chain
// that a chain for restore jumps to goes through restore too, as it must
// exist before that chain is written.
func (t *Table) split(rewritten []string) (direct []encodedChain, viaRestore []string, ok bool) {
	if t.direct == nil {
		return nil, nil, false
	}
	encoded := map[string]encodedChain{}
	for _, name := range rewritten {
		c, err := t.direct.encodeChain(name, t.desired[name])
		if err != nil {
			if len(t.kernel) > 0 {
				return nil, nil, false // not the first write
			}
			viaRestore = append(viaRestore, name)
			continue
		}
		encoded[name] = c
	}
	for i := 0; i < len(viaRestore); i++ {
		for _, r := range t.desired[viaRestore[i]] {
			for _, target := range r.Targets() {
				if _, ok := encoded[target]; ok {
					if _, exists := t.kernel[target]; !exists {
						delete(encoded, target)
						viaRestore = append(viaRestore, target)
					}
				}
			}
		}
	}
	if len(encoded) == 0 {
		return nil, nil, false
	}
	for _, name := range rewritten {
		if c, ok := encoded[name]; ok {
			direct = append(direct, c)
		}
	}
	return direct, viaRestore, true
}

// restore writes chains whole, deletes stale ones and applies the jump
// fixes (tail) in one iptables-restore --noflush.
func (t *Table) restore(ctx context.Context, rewritten, stale []string, tail string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n", t.Name)
	for _, name := range rewritten {
		fmt.Fprintf(&b, ":%s - [0:0]\n", name)
	}
	for _, name := range stale {
		// Flushed first, so stale chains that jump to each other can go.
		fmt.Fprintf(&b, ":%s - [0:0]\n", name)
	}
	for _, name := range rewritten {
		for _, r := range t.desired[name] {
			b.WriteString("-A ")
			b.WriteString(name)
			b.WriteByte(' ')
			b.WriteString(r.Text())
			b.WriteByte('\n')
		}
	}
	b.WriteString(tail)
	for _, name := range stale {
		fmt.Fprintf(&b, "-X %s\n", name)
	}
	b.WriteString("COMMIT\n")
	args := []string{"--noflush"}
	if t.wait {
		args = append(args, "--wait", "10")
	}
	run := t.run.RunWarm // iptables-nft-restore touches nothing before its input.
	if t.wait {
		run = t.run.Run // legacy: a waiting process could hold the xtables lock.
	}
	_, err := run(ctx, b.String(), t.restor, args...)
	t.metrics.Restore(err)
	if err != nil {
		t.needRead = true
		return fmt.Errorf("writing table %s (IPv%d): %w", t.Name, t.family, err)
	}
	return nil
}

// Close releases the netlink connection of direct writes.
func (t *Table) Close() {
	if t.direct != nil {
		t.direct.close()
	}
}

// wrote records what a successful write changed in the kernel.
func (t *Table) wrote(rewritten, stale, fixedJumps []string) {
	for _, name := range rewritten {
		t.kernel[name] = hashes(t.desired[name])
	}
	for _, name := range stale {
		delete(t.kernel, name)
	}
	for _, chain := range fixedJumps {
		var others []kernelRule
		for _, r := range t.kernelChains[chain] {
			if r.hash == "" {
				others = append(others, r)
			}
		}
		var ours []kernelRule
		for _, r := range t.jumps[chain] {
			ours = append(ours, kernelRule{hash: r.Hash, spec: r.Text()})
		}
		if t.insertMode == Insert {
			t.kernelChains[chain] = append(ours, others...)
		} else {
			t.kernelChains[chain] = append(others, ours...)
		}
	}
	t.jumpsVerified, t.replaceJumps = true, false
}
