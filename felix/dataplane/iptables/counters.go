package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

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
