package inspect

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	palbpf "github.com/palisade-net/palisade/bpf"
)

// hookOf says which hook a stage runs at.
func hookOf(stage int) string {
	if stage <= palbpf.StageForwardIn {
		return "in (TCX ingress: packets arriving by the interface)"
	}
	return "out (TCX egress: packets leaving by the interface)"
}

// WritePolicy prints an interface's entry and the rules of each of its
// stages with their packet counts, as `calico-node bpf policy dump`.
func WritePolicy(w io.Writer, in Interface, cs []Counter) {
	count := countsOf(cs)
	fmt.Fprintf(w, "Interface %s (ifindex %d): %s\n", in.Name, in.Ifindex, in.Kind)
	if in.Kind == "blocked" {
		fmt.Fprintln(w, "  unknown workload interface: every packet is dropped")
		return
	}
	if in.Kind == "workload" {
		srcs := make([]string, len(in.Sources))
		for i, s := range in.Sources {
			srcs[i] = s.String()
		}
		fmt.Fprintf(w, "  allowed sources: %s\n", strings.Join(srcs, ", "))
		fmt.Fprintf(w, "  traffic to the host after policy: %s\n", map[bool]string{true: "allowed", false: "dropped"}[in.ToHostOK])
	}
	hook := ""
	for i, st := range in.Stages {
		if st == nil {
			continue
		}
		if h := hookOf(i); h != hook {
			hook = h
			fmt.Fprintf(w, "Hook %s\n", h)
		}
		fmt.Fprintf(w, "  Stage %s: program %s (id %d, slot %d)\n", palbpf.StageNames[i], st.Name, st.Program, st.Slot)
		if st.Desc == nil {
			fmt.Fprintln(w, "    (no description: not a Palisade policy program)")
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, s := range st.Desc.Slots {
			where := s.Tier + "/" + s.Policy
			if s.Profile != "" {
				where = "profile " + s.Profile
			} else if s.Policy == "" {
				where = "-"
			}
			rule := fmt.Sprint(s.Rule)
			if s.Rule < 0 {
				rule = "-"
			}
			c := count[CounterKey{in.Ifindex, i, s.ID}]
			fmt.Fprintf(tw, "    [%d]\t%s\trule %s\t%s\t%s\tpackets=%d\tbytes=%d\n", s.Slot, where, rule, s.Action, s.Match, c.Packets, c.Bytes)
		}
		tw.Flush()
	}
}

// WriteCounters prints every interface's counters, as `calico-node bpf
// counters`: the reasons packets were allowed or dropped outside rules,
// then the packets each rule decided.
func WriteCounters(w io.Writer, ifs []Interface, cs []Counter) {
	names := map[int]string{}
	stages := map[int][palbpf.Stages]*Stage{}
	for _, in := range ifs {
		names[in.Ifindex] = in.Name
		stages[in.Ifindex] = in.Stages
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERFACE\tSTAGE\tWHAT\tPACKETS\tBYTES")
	for _, c := range cs {
		name := names[c.Ifindex]
		if name == "" {
			name = fmt.Sprintf("ifindex %d", c.Ifindex)
		}
		if c.Stage == palbpf.StageGeneral {
			what := fmt.Sprintf("reason %d", c.Rule)
			if c.Rule < uint64(len(palbpf.Reasons)) {
				what = palbpf.Reasons[c.Rule]
			}
			fmt.Fprintf(tw, "%s\t-\t%s\t%d\t%d\n", name, what, c.Packets, c.Bytes)
			continue
		}
		stage, what := fmt.Sprint(c.Stage), fmt.Sprintf("rule id %#016x (no program of the stage has it)", c.Rule)
		if c.Stage < palbpf.Stages {
			stage = palbpf.StageNames[c.Stage]
			var slot *palbpf.Slot
			if st := stages[c.Ifindex][c.Stage]; st != nil && st.Desc != nil {
				if i := slices.IndexFunc(st.Desc.Slots, func(s palbpf.Slot) bool { return s.ID == c.Rule }); i >= 0 {
					slot = &st.Desc.Slots[i]
				}
			}
			if slot != nil {
				s := *slot
				switch {
				case s.Profile != "":
					what = fmt.Sprintf("profile %s rule %d %s", s.Profile, s.Rule, s.Action)
				case s.Rule >= 0:
					what = fmt.Sprintf("%s/%s rule %d %s", s.Tier, s.Policy, s.Rule, s.Action)
				default:
					what = s.Action + ": " + s.Match
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", name, stage, what, c.Packets, c.Bytes)
	}
	tw.Flush()
}

// WriteConntrack prints the conntrack entries, opener first, as
// `calico-node bpf conntrack dump`; now is the monotonic clock in ns.
func WriteConntrack(w io.Writer, flows []Flow, now uint64) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERFACE\tPROTO\tFROM\tTO\tSTATE\tAGE\tIDLE")
	for _, f := range flows {
		from, to := endpoint(f.A, f.PortA), endpoint(f.B, f.PortB)
		if f.Opener == "b" {
			from, to = to, from
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Iface, protoName(f.Proto), from, to, ctState(f),
			since(now, f.Created), since(now, f.LastSeen))
	}
	tw.Flush()
}

func endpoint(a fmt.Stringer, port uint16) string { return fmt.Sprintf("%s:%d", a, port) }

func since(now, t uint64) string {
	if t > now {
		return "0s"
	}
	return time.Duration(now - t).Truncate(time.Second).String()
}

func protoName(p uint8) string {
	if n, ok := map[uint8]string{1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6", 132: "sctp", 136: "udplite"}[p]; ok {
		return n
	}
	return fmt.Sprint(p)
}

func ctState(f Flow) string {
	switch {
	case f.Flags&0x10 != 0:
		return "reset"
	case f.Flags&0x0c == 0x0c:
		return "closing"
	case f.Flags&0x02 != 0:
		return "established"
	}
	return "new"
}

// WriteIPSets prints the IP sets and their members, as `calico-node bpf
// ipsets dump`.
func WriteIPSets(w io.Writer, sets map[string][]string) {
	ids := make([]string, 0, len(sets))
	for id := range sets {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ms := slices.Clone(sets[id])
		sort.Strings(ms)
		if strings.HasPrefix(id, "0x") {
			fmt.Fprintf(w, "IP set %s: %d members\n", id, len(ms))
		} else {
			fmt.Fprintf(w, "IP set %s (id %#016x): %d members\n", id, palbpf.SetID(id), len(ms))
		}
		for _, m := range ms {
			fmt.Fprintf(w, "  %s\n", m)
		}
	}
}
