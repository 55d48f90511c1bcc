package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/node/status"
)

// defaultSourcePort is the source port of an explained packet when none
// is given: the first of Linux's ephemeral ports.
const defaultSourcePort = 32768

type explainFlags struct {
	from, to, protocol, output, atNode string
	port, sourcePort                   int
	icmpType, icmpCode                 int
}

func newPolicyExplainCommand(a *app, ns *nodeSocket) *cobra.Command {
	f := &explainFlags{}
	cmd := &cobra.Command{
		Use:   "explain --from NS/POD|ENDPOINT|IP --to NS/POD|ENDPOINT|IP [--port N] [--protocol tcp|udp|sctp|icmp|N]",
		Short: "Explain why a packet between two endpoints is allowed or denied",
		Long: `Explain, rule by rule, what felix's policy does with the first packet of a
connection from --from to --to: the egress of the source when it is an
endpoint, the host endpoints a forwarded packet crosses, and the ingress of
the destination; for each, every tier, policy and rule tried, why each did or
did not match, and what decided. The evaluation is felix's own (its rule
compiler, IP set membership and tier order).

An end is a pod or WorkloadEndpoint as NAMESPACE/NAME, a HostEndpoint by
name, or an IP address (of an endpoint, of a node, or outside the cluster).

By default calicoctl reads the datastore. With --at-node NODE it asks that
node's running calico-node (its status socket in --run-dir), which answers
from its live state and adds each rule's packet and byte counters.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := f.query(cmd)
			if err != nil {
				return err
			}
			format := strings.ToLower(f.output)
			if format != "" && format != "text" && format != formatJSON && format != formatYAML {
				return fmt.Errorf("unrecognized output format '%s' (want text, json or yaml)", f.output)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			var x *calc.Explanation
			if f.atNode != "" {
				x, err = explainAtNode(ctx, ns, f.atNode, q)
			} else {
				x, err = a.explainFromDatastore(ctx, q)
			}
			if err != nil {
				if errors.Is(err, calc.ErrBadQuery) {
					return errors.New(strings.TrimPrefix(err.Error(), calc.ErrBadQuery.Error()+": "))
				}
				return err
			}
			return writeExplanation(a.env.Out, format, x)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "The source: NAMESPACE/POD, NAMESPACE/WORKLOADENDPOINT, HOSTENDPOINT or IP.")
	fl.StringVar(&f.to, "to", "", "The destination, as --from.")
	fl.IntVar(&f.port, "port", 0, "The destination port (required for tcp, udp, sctp and udplite).")
	fl.IntVar(&f.sourcePort, "source-port", defaultSourcePort, "The source port.")
	fl.StringVar(&f.protocol, "protocol", "tcp", "The protocol: tcp, udp, sctp, udplite, icmp, icmpv6 or a number 1-255.")
	fl.IntVar(&f.icmpType, "icmp-type", 8, "The ICMP type (icmp and icmpv6; 8 is an echo request, use 128 for icmpv6).")
	fl.IntVar(&f.icmpCode, "icmp-code", 0, "The ICMP code.")
	fl.StringVarP(&f.output, "output", "o", "text", "Output format: text, json or yaml.")
	fl.StringVar(&f.atNode, "at-node", "", "Ask this node's running calico-node (over the status socket in --run-dir) instead of the datastore.")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// query turns the flags into a question.
func (f *explainFlags) query(cmd *cobra.Command) (calc.Query, error) {
	var q calc.Query
	proto, err := parseProtocol(f.protocol)
	if err != nil {
		return q, err
	}
	q.Protocol = proto
	q.From, q.To = parseEnd(f.from), parseEnd(f.to)
	for _, e := range []struct {
		flag string
		v    string
	}{{"--from", f.from}, {"--to", f.to}} {
		if strings.TrimSpace(e.v) == "" {
			return q, fmt.Errorf("%s: an end is needed (NAMESPACE/POD, HOSTENDPOINT or IP)", e.flag)
		}
	}
	switch {
	case calc.ProtocolHasPorts(proto):
		if !cmd.Flags().Changed("port") {
			return q, fmt.Errorf("--port is required for protocol %s", calc.ProtocolName(proto))
		}
		if f.port < 1 || f.port > 65535 {
			return q, fmt.Errorf("--port %d: want 1-65535", f.port)
		}
		if f.sourcePort < 1 || f.sourcePort > 65535 {
			return q, fmt.Errorf("--source-port %d: want 1-65535", f.sourcePort)
		}
		q.DstPort, q.SrcPort = uint16(f.port), uint16(f.sourcePort)
	case cmd.Flags().Changed("port") || cmd.Flags().Changed("source-port"):
		return q, fmt.Errorf("protocol %s has no ports: --port and --source-port need tcp, udp, sctp or udplite", calc.ProtocolName(proto))
	}
	if proto == 1 || proto == 58 {
		t := f.icmpType
		if proto == 58 && !cmd.Flags().Changed("icmp-type") {
			t = 128 // echo request
		}
		if t < 0 || t > 255 || f.icmpCode < 0 || f.icmpCode > 255 {
			return q, fmt.Errorf("--icmp-type %d --icmp-code %d: each wants 0-255", t, f.icmpCode)
		}
		q.ICMPType, q.ICMPCode = uint8(t), uint8(f.icmpCode)
	} else if cmd.Flags().Changed("icmp-type") || cmd.Flags().Changed("icmp-code") {
		return q, fmt.Errorf("--icmp-type and --icmp-code need protocol icmp or icmpv6")
	}
	return q, nil
}

// parseProtocol reads a protocol name or number.
func parseProtocol(s string) (uint8, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "tcp":
		return 6, nil
	case "udp":
		return 17, nil
	case "sctp":
		return 132, nil
	case "udplite":
		return 136, nil
	case "icmp":
		return 1, nil
	case "icmpv6":
		return 58, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 1 && n <= 255 {
		return uint8(n), nil
	}
	return 0, fmt.Errorf("unsupported protocol %q: want tcp, udp, sctp, udplite, icmp, icmpv6 or a number 1-255", s)
}

// parseEnd reads NAMESPACE/NAME, an IP address, or a HostEndpoint name.
func parseEnd(s string) calc.End {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return calc.End{Address: a.String()}
	}
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return calc.End{Namespace: ns, Name: name}
	}
	if looksLikeAddr(s) {
		return calc.End{Address: s} // Explain names what is wrong with it.
	}
	return calc.End{Name: s}
}

// looksLikeAddr says whether s was meant as an address (digits and dots,
// or colons).
func looksLikeAddr(s string) bool {
	if strings.Contains(s, ":") {
		return true
	}
	return s != "" && strings.Trim(s, "0123456789.") == "" && strings.Contains(s, ".")
}

// explainFromDatastore reads what the explanation needs and explains.
func (a *app) explainFromDatastore(ctx context.Context, q calc.Query) (*calc.Explanation, error) {
	s, err := a.connectIPAM(ctx)
	if err != nil {
		return nil, err
	}
	defer s.close()
	g, q, err := calc.LoadExplain(ctx, s.client.Store(), s.kv, q)
	if err != nil {
		return nil, err
	}
	return g.Explain(q)
}

// explainAtNode asks the running calico-node of node.
func explainAtNode(ctx context.Context, ns *nodeSocket, node string, q calc.Query) (*calc.Explanation, error) {
	if err := ns.check(ctx, node); err != nil {
		return nil, err
	}
	return status.Explain(ctx, ns.path(), q)
}

func writeExplanation(w io.Writer, format string, x *calc.Explanation) error {
	switch format {
	case formatJSON:
		b, err := json.MarshalIndent(x, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case formatYAML:
		b, err := yaml.Marshal(x)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err := io.WriteString(w, explanationText(x))
	return err
}

// explanationText renders an explanation for people.
func explanationText(x *calc.Explanation) string {
	var b strings.Builder
	p := x.Packet
	src, dst := p.Source, p.Destination
	if p.SourcePort != 0 || p.DestinationPort != 0 {
		src = netip.AddrPortFrom(netip.MustParseAddr(p.Source), p.SourcePort).String()
		dst = netip.AddrPortFrom(netip.MustParseAddr(p.Destination), p.DestinationPort).String()
	}
	fmt.Fprintf(&b, "Packet: %s %s -> %s", p.Protocol, src, dst)
	if p.ICMPType != nil {
		fmt.Fprintf(&b, " type %d code %d", *p.ICMPType, *p.ICMPCode)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "From:   %s\n", peerText(x.From))
	if t := x.Service; t != nil {
		backend := t.Backend
		if backend == "" {
			backend = "no endpoints: refused"
		}
		fmt.Fprintf(&b, "Service: %s, %s %s -> %s (backends: %s)\n", t.Service, t.Kind, t.Frontend, backend, strings.Join(t.Backends, ", "))
	}
	fmt.Fprintf(&b, "To:     %s\n", peerText(x.To))
	if x.Node != "" {
		fmt.Fprintf(&b, "Answered by calico-node on %s, from its live state.\n", x.Node)
	}
	for _, s := range x.Sides {
		b.WriteString("\n")
		dir := "Egress of"
		if s.Direction == "ingress" {
			dir = "Ingress of"
		}
		fmt.Fprintf(&b, "%s %s: %s", dir, peerText(s.Endpoint), s.Verdict)
		if s.NotReached {
			b.WriteString(" (not reached: the packet is dropped before)")
		}
		b.WriteString("\n")
		for _, st := range s.Stages {
			writeStage(&b, st)
		}
		if s.Decider != nil {
			fmt.Fprintf(&b, "  Decided by: %s\n", s.Decider.Text)
		}
	}
	b.WriteString("\n")
	verdict := string(x.Verdict)
	if len(x.Sides) == 0 {
		verdict += " (no policy applies to this packet)"
	}
	if x.Incomplete {
		verdict += " (the dataplane's may differ: see the notes)"
	}
	fmt.Fprintf(&b, "Verdict: %s\n", verdict)
	for _, n := range x.Notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}
	return b.String()
}

func peerText(p calc.Peer) string {
	switch p.Kind {
	case calc.PeerWorkload:
		name := "WorkloadEndpoint " + p.Namespace + "/" + p.Name
		if p.Pod != "" {
			name = "pod " + p.Namespace + "/" + p.Pod
		}
		return fmt.Sprintf("%s (%s on node %s)", name, p.Address, p.Node)
	case calc.PeerHostEP:
		return fmt.Sprintf("host endpoint %s (%s on node %s)", p.Name, p.Address, p.Node)
	case calc.PeerHost:
		return fmt.Sprintf("host %s (%s, no host endpoint)", p.Node, p.Address)
	case calc.PeerService:
		return p.Address + " (a Service address without endpoints)"
	}
	return p.Address + " (outside the cluster)"
}

var stageTitles = map[string]string{
	calc.StageNeighbourDiscovery: "neighbour discovery",
	calc.StageFailsafe:           "failsafe ports",
	calc.StageUntracked:          "untracked (doNotTrack) policy",
	calc.StagePreDNAT:            "preDNAT policy",
	calc.StageForward:            "forward (applyOnForward) policy",
	calc.StagePolicy:             "policy",
	calc.StageEndpointToHost:     "defaultEndpointToHostAction",
	calc.StageNotPoliced:         "not policed",
}

func writeStage(b *strings.Builder, st calc.Stage) {
	title := stageTitles[st.Name]
	if st.Endpoint != "" {
		title += " of host endpoint " + st.Endpoint
	}
	fmt.Fprintf(b, "  %s: %s\n", title, st.Verdict)
	if st.Chain == nil {
		return // its decider is the side's
	}
	for _, t := range st.Chain.Tiers {
		outcome := string(t.Outcome)
		if t.EndOfTier {
			outcome = "end of tier, default " + string(t.DefaultAction)
		}
		fmt.Fprintf(b, "    tier %s: %s\n", t.Name, outcome)
		for _, p := range t.Policies {
			writePolicy(b, p, "      ")
		}
	}
	if len(st.Chain.Profiles) > 0 {
		b.WriteString("    profiles:\n")
		for _, p := range st.Chain.Profiles {
			writePolicy(b, p, "      ")
		}
	}
}

func writePolicy(b *strings.Builder, p calc.PolicyResult, indent string) {
	name := p.Name
	if p.Namespace != "" {
		name = p.Namespace + "/" + p.Name
	}
	outcome := string(p.Outcome)
	if p.Outcome == calc.OutcomeNoMatch {
		outcome = "no rule matched"
	}
	fmt.Fprintf(b, "%s%s %s: %s\n", indent, p.Kind, name, outcome)
	if len(p.Rules) == 0 {
		fmt.Fprintf(b, "%s  (no rules for this direction)\n", indent)
	}
	for _, r := range p.Rules {
		action := string(r.Action)
		if action == "" {
			action = "-"
		}
		line := fmt.Sprintf("%s  rule %d %s: ", indent, r.Index, action)
		if r.Name != "" {
			line = fmt.Sprintf("%s  rule %d %s %q: ", indent, r.Index, action, r.Name)
		}
		switch {
		case r.Matched:
			line += "matched"
			if r.Action == calc.Log {
				line += " (logged; evaluation goes on)"
			}
		case r.Miss != nil && r.Miss.Field != "":
			line += "no, " + r.Miss.Field + ": " + r.Miss.Reason
		case r.Miss != nil:
			line += "no, " + r.Miss.Reason
		default:
			line += "no"
		}
		if r.Packets != nil {
			line += fmt.Sprintf(" [%d packets, %d bytes]", *r.Packets, *r.Bytes)
		}
		b.WriteString(line + "\n")
		if r.Unenforced != "" && r.Matched || r.Unenforced != "" && r.Miss != nil && r.Miss.Field != "" {
			fmt.Fprintf(b, "%s    note: %s\n", indent, r.Unenforced)
		}
	}
}
