package iptables

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
	"github.com/palisade-net/palisade/felix/rules"
)

// nftDirect writes chains of the nft backend in one nftables transaction
// sent over netlink, each rule encoded exactly as iptables-nft encodes it
// (so iptables-nft-save prints it as if iptables-nft-restore had written
// it; a test compares the two). It knows the rule forms of workload
// endpoint and dispatch chains — interface, conntrack state and mark
// matches, comments, MARK, jumps, gotos and verdicts — which are what a
// new pod or a changed endpoint needs; a change with any other rule goes
// through iptables-nft-restore. Skipping that process (its start, its read
// of the table's chains, its parsing) is what makes a new pod's rules land
// in about a millisecond.
type nftDirect struct {
	conn  *nftables.Conn
	table *nftables.Table
}

func newNFTDirect(run *nsexec.Runner, family int, table string) (*nftDirect, error) {
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if h := run.Handle(); h >= 0 {
		opts = append(opts, nftables.WithNetNSFd(int(h)))
	}
	conn, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables netlink connection: %w", err)
	}
	fam := nftables.TableFamilyIPv4
	if family == 6 {
		fam = nftables.TableFamilyIPv6
	}
	return &nftDirect{conn: conn, table: &nftables.Table{Name: table, Family: fam}}, nil
}

func (w *nftDirect) close() { _ = w.conn.CloseLasting() }

// directMaxRules bounds a direct write: a batch must fit one netlink
// message, and large changes (a first write, a resync) are not where a
// process start matters.
const directMaxRules = 300

// encodable reports whether every rule of the chains can be written
// directly, and they are few enough.
func (w *nftDirect) encodable(chains map[string][]rules.Rule, names []string) bool {
	n := 0
	for _, name := range names {
		if n += len(chains[name]); n > directMaxRules {
			return false
		}
		for _, r := range chains[name] {
			if _, err := w.encode(r); err != nil {
				return false
			}
		}
	}
	return true
}

// write rewrites chains (created when missing, emptied otherwise) and
// deletes stale ones, in one transaction: all of it or none.
func (w *nftDirect) write(desired map[string][]rules.Rule, rewritten, stale []string) error {
	chain := func(name string) *nftables.Chain { return &nftables.Chain{Name: name, Table: w.table} }
	for _, name := range rewritten {
		// Created when missing (no error when present), then emptied.
		w.conn.AddChain(chain(name))
		w.conn.FlushChain(chain(name))
	}
	for _, name := range stale {
		w.conn.FlushChain(chain(name))
	}
	for _, name := range rewritten {
		c := chain(name)
		for _, r := range desired[name] {
			exprs, err := w.encode(r)
			if err != nil {
				return err
			}
			w.conn.AddRule(&nftables.Rule{Table: w.table, Chain: c, Exprs: exprs})
		}
	}
	for _, name := range stale {
		w.conn.DelChain(chain(name))
	}
	return w.conn.Flush()
}

// encode turns one rule into the expressions iptables-nft writes for it:
// the interface and match options in order, each comment as an xt
// comment match, a counter, then the verdict or target.
func (w *nftDirect) encode(r rules.Rule) ([]expr.Any, error) {
	var out []expr.Any
	var verdict expr.Any
	f := strings.Fields(r.Match)
	for i := 0; i < len(f); i++ {
		arg := func() (string, error) {
			if i+1 >= len(f) {
				return "", fmt.Errorf("%s without a value", f[i])
			}
			i++
			return f[i], nil
		}
		switch f[i] {
		case "-i", "-o":
			key := expr.MetaKeyIIFNAME
			if f[i] == "-o" {
				key = expr.MetaKeyOIFNAME
			}
			name, err := arg()
			if err != nil {
				return nil, err
			}
			data := []byte(name + "\x00")
			if p, ok := strings.CutSuffix(name, "+"); ok {
				data = []byte(p)
			}
			if len(data) == 0 || len(data) > unix.IFNAMSIZ {
				return nil, fmt.Errorf("interface %q", name)
			}
			out = append(out, &expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data})
		case "-g":
			target, err := arg()
			if err != nil {
				return nil, err
			}
			verdict = &expr.Verdict{Kind: expr.VerdictGoto, Chain: target}
		case "-m":
			mod, err := arg()
			if err != nil {
				return nil, err
			}
			opt, err := arg()
			if err != nil {
				return nil, err
			}
			val, err := arg()
			if err != nil {
				return nil, err
			}
			switch {
			case mod == "conntrack" && opt == "--ctstate":
				mask, err := ctStates(val)
				if err != nil {
					return nil, err
				}
				info := &xt.ConntrackMtinfo3{}
				info.MatchFlags, info.StateMask = 1, mask // XT_CONNTRACK_STATE
				out = append(out, &expr.Match{Name: "conntrack", Rev: 3, Info: info})
			case mod == "mark" && opt == "--mark":
				v, m, err := markPair(val)
				if err != nil {
					return nil, err
				}
				out = append(out, &expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
					&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: hostU32(m), Xor: hostU32(0)},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: hostU32(v)})
			default:
				return nil, fmt.Errorf("match %s %s not encoded", mod, opt)
			}
		default:
			return nil, fmt.Errorf("option %s not encoded", f[i])
		}
	}
	for _, c := range []string{"cali:" + r.Hash, r.Comment} {
		if c == "" {
			continue
		}
		if len(c) >= xt.CommentSize || strings.ContainsAny(c, "\"\\") {
			return nil, fmt.Errorf("comment %q not encoded", c)
		}
		cm := xt.Comment(c)
		out = append(out, &expr.Match{Name: "comment", Rev: 0, Info: &cm})
	}
	out = append(out, &expr.Counter{})
	a := strings.Fields(r.Action)
	switch {
	case len(a) == 0:
		if verdict == nil {
			return nil, fmt.Errorf("rule without action")
		}
	case verdict != nil:
		return nil, fmt.Errorf("goto and -j both")
	case len(a) == 1 && a[0] == "ACCEPT":
		verdict = &expr.Verdict{Kind: expr.VerdictAccept}
	case len(a) == 1 && a[0] == "DROP":
		verdict = &expr.Verdict{Kind: expr.VerdictDrop}
	case len(a) == 1 && a[0] == "RETURN":
		verdict = &expr.Verdict{Kind: expr.VerdictReturn}
	case len(a) == 1 && strings.HasPrefix(a[0], ChainPrefix):
		verdict = &expr.Verdict{Kind: expr.VerdictJump, Chain: a[0]}
	case len(a) == 3 && a[0] == "MARK" && a[1] == "--set-xmark":
		v, m, err := markPair(a[2])
		if err != nil {
			return nil, err
		}
		info := xt.Unknown(append(hostU32(v), hostU32(m)...)) // struct xt_mark_tginfo2
		verdict = &expr.Target{Name: "MARK", Rev: 2, Info: &info}
	default:
		return nil, fmt.Errorf("action %q not encoded", r.Action)
	}
	return append(out, verdict), nil
}

// ctStates is the xt_conntrack state mask of a --ctstate list.
func ctStates(list string) (uint16, error) {
	bits := map[string]uint16{"INVALID": 1, "ESTABLISHED": 2, "RELATED": 4, "NEW": 8, "UNTRACKED": 64}
	var mask uint16
	for _, s := range strings.Split(list, ",") {
		b, ok := bits[s]
		if !ok {
			return 0, fmt.Errorf("conntrack state %q not encoded", s)
		}
		mask |= b
	}
	return mask, nil
}

// markPair parses "value/mask".
func markPair(s string) (value, mask uint32, err error) {
	v, m, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("mark %q: want value/mask", s)
	}
	pv, err1 := strconv.ParseUint(v, 0, 32)
	pm, err2 := strconv.ParseUint(m, 0, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("mark %q: not numbers", s)
	}
	return uint32(pv), uint32(pm), nil
}

// hostU32 is a 32-bit value in the byte order the kernel keeps marks in (the
// host's).
func hostU32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
