package iptables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// RuleKey names one of our kernel rules: its chain and hash comment.
type RuleKey struct {
	Chain, Hash string
}

// Counter is a kernel rule's packet and byte counters.
type Counter struct {
	Packets, Bytes uint64
}

// ReadCounters reads the counters of our rules (cali- chains) of one
// table, with `iptables-save -c`, by the hash comment each carries.
func ReadCounters(ctx context.Context, run *nsexec.Runner, backend Backend, family int, table string) (map[RuleKey]Counter, error) {
	save, _ := backend.Commands(family)
	out, err := run.Run(ctx, "", save, "-c", "-t", table)
	if err != nil {
		return nil, fmt.Errorf("reading the counters of table %s (IPv%d): %w", table, family, err)
	}
	return parseCounters(out)
}

// parseCounters reads `iptables-save -c` output: lines such as
// `[12:720] -A cali-pi-x ... --comment "cali:<hash>" ...`.
func parseCounters(out []byte) (map[RuleKey]Counter, error) {
	cs := map[RuleKey]Counter{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "[") {
			continue
		}
		pair, rest, ok := strings.Cut(line[1:], "] ")
		if !ok || !strings.HasPrefix(rest, "-A ") {
			continue
		}
		chain, spec, _ := strings.Cut(rest[3:], " ")
		if !strings.HasPrefix(chain, ChainPrefix) {
			continue
		}
		m := hashRe.FindStringSubmatch(spec)
		if m == nil {
			continue
		}
		p, b, ok := strings.Cut(pair, ":")
		packets, err1 := strconv.ParseUint(p, 10, 64)
		bytes, err2 := strconv.ParseUint(b, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("iptables-save -c: bad counters in %q", line)
		}
		cs[RuleKey{chain, m[1]}] = Counter{packets, bytes}
	}
	return cs, sc.Err()
}

// ReadChainCounters reads the counters of the rules of a few chains of a
// table. On the nft backend each chain is one netlink dump (a large
// table's iptables-save -c costs hundreds of milliseconds); rules are
// told by the hash comment iptables-nft keeps in an xt comment match or,
// as the direct writer leaves it, in the rule's userdata. The legacy
// backend reads the table with iptables-save -c.
func ReadChainCounters(ctx context.Context, run *nsexec.Runner, backend Backend, family int, table string, chains []string) (map[RuleKey]Counter, error) {
	if backend != NFT {
		return ReadCounters(ctx, run, backend, family, table)
	}
	var opts []nftables.ConnOption
	if h := run.Handle(); h >= 0 {
		opts = append(opts, nftables.WithNetNSFd(int(h)))
	}
	conn, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("reading counters of table %s (IPv%d): %w", table, family, err)
	}
	defer conn.CloseLasting()
	fam := nftables.TableFamilyIPv4
	if family == 6 {
		fam = nftables.TableFamilyIPv6
	}
	t := &nftables.Table{Name: table, Family: fam}
	cs := map[RuleKey]Counter{}
	for _, name := range chains {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rs, err := conn.GetRules(t, &nftables.Chain{Name: name, Table: t})
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // not written (yet, or any more)
			}
			return nil, fmt.Errorf("reading the counters of chain %s of table %s (IPv%d): %w", name, table, family, err)
		}
		for _, r := range rs {
			hash, c, ok := nftRuleCounter(r)
			if ok {
				cs[RuleKey{name, hash}] = c
			}
		}
	}
	return cs, nil
}

// nftRuleCounter finds a rule's hash comment and counter.
func nftRuleCounter(r *nftables.Rule) (hash string, c Counter, ok bool) {
	comments := userdataComments(r.UserData)
	found := false
	for _, e := range r.Exprs {
		switch x := e.(type) {
		case *expr.Counter:
			c, found = Counter{Packets: x.Packets, Bytes: x.Bytes}, true
		case *expr.Match:
			if cm, isComment := x.Info.(*xt.Comment); x.Name == "comment" && isComment {
				comments = append(comments, string(*cm))
			}
		}
	}
	for _, cm := range comments {
		if h, isHash := strings.CutPrefix(cm, "cali:"); isHash && len(h) == 16 {
			return h, c, found
		}
	}
	return "", c, false
}

// userdataComments reads the comments iptables-nft keeps in a rule's
// userdata: type-length-value records, type 0 a NUL-terminated comment.
func userdataComments(ud []byte) []string {
	var out []string
	for len(ud) >= 2 {
		typ, n := ud[0], int(ud[1])
		if 2+n > len(ud) {
			break
		}
		if typ == 0 {
			out = append(out, strings.TrimRight(string(ud[2:2+n]), "\x00"))
		}
		ud = ud[2+n:]
	}
	return out
}
