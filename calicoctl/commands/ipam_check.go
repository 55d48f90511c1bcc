package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

type ipamCheckOptions struct {
	showProblemIPs bool
	output         string
}

func newIPAMCheckCommand(a *app) *cobra.Command {
	o := &ipamCheckOptions{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the integrity of the IPAM datastructures",
		Long: "Check reports addresses allocated in IPAM that no WorkloadEndpoint or node uses\n" +
			"(leaked), blocks affine to nodes that do not exist, and addresses allocated for\n" +
			"nodes that do not exist. It changes nothing.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.ipamCheck(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.showProblemIPs, "show-problem-ips", false, "Print each IP address that has a problem.")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Write a JSON report of the problems to this file.")
	return cmd
}

// checkReport is what `ipam check -o` writes.
type checkReport struct {
	Blocks      int `json:"blocks"`
	Allocations int `json:"allocations"`
	Pools       int `json:"pools"`
	Nodes       int `json:"nodes"`
	WorkloadIPs int `json:"workloadIPs"`
	// Leaked are allocations that no WorkloadEndpoint and no node's tunnel
	// address uses.
	Leaked []checkedIP `json:"leakedIPs"`
	// MissingNodeBlocks are blocks affine to nodes that do not exist.
	MissingNodeBlocks []checkedBlock `json:"blocksOfMissingNodes"`
	// MissingNodeIPs are allocations made for nodes that do not exist.
	MissingNodeIPs []checkedIP `json:"ipsOfMissingNodes"`
	Problems       int         `json:"problems"`
}

type checkedIP struct {
	IP       string            `json:"ip"`
	Block    string            `json:"block"`
	Handle   string            `json:"handle,omitempty"`
	Attrs    map[string]string `json:"attributes,omitempty"`
	NodeName string            `json:"node,omitempty"`
}

type checkedBlock struct {
	CIDR string `json:"cidr"`
	Node string `json:"node"`
}

func (a *app) ipamCheck(ctx context.Context, o *ipamCheckOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	s, err := a.connectIPAM(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	out := a.env.Out
	rep := checkReport{Leaked: []checkedIP{}, MissingNodeBlocks: []checkedBlock{}, MissingNodeIPs: []checkedIP{}}

	fmt.Fprintln(out, "Checking IPAM for inconsistencies...")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Loading all IPAM blocks...")
	blocks, err := s.alloc.ListBlocks(ctx)
	if err != nil {
		return fmt.Errorf("listing IPAM blocks: %w", err)
	}
	rep.Blocks = len(blocks)
	fmt.Fprintf(out, "Found %d IPAM blocks.\n", len(blocks))
	for _, b := range blocks {
		aff := "<none>"
		if b.Host != "" {
			aff = "host:" + b.Host
		}
		fmt.Fprintf(out, " IPAM block %s affinity=%s:\n", b.CIDR, aff)
		rep.Allocations += len(b.Allocations)
	}
	fmt.Fprintf(out, "IPAM blocks record %d allocations.\n\n", rep.Allocations)

	fmt.Fprintln(out, "Loading all IPAM pools...")
	pools, _, err := s.client.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		return fmt.Errorf("listing IP pools: %w", err)
	}
	for _, r := range pools {
		p := r.(*v3.IPPool)
		if !p.Spec.Disabled {
			rep.Pools++
			fmt.Fprintf(out, "  %s\n", p.Spec.CIDR)
		}
	}
	fmt.Fprintf(out, "Found %d active IP pools.\n\n", rep.Pools)

	fmt.Fprintln(out, "Loading all nodes.")
	nodeList, _, err := s.client.List(ctx, datastore.ListOptions{Kind: v3.KindNode})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	nodes := map[string]bool{}
	used := map[netip.Addr]bool{}
	tunnels := 0
	for _, r := range nodeList {
		n := r.(*v3.Node)
		nodes[n.Name] = true
		addrs := []string{n.Spec.IPv4VXLANTunnelAddr, n.Spec.IPv6VXLANTunnelAddr}
		if n.Spec.BGP != nil {
			addrs = append(addrs, n.Spec.BGP.IPv4IPIPTunnelAddr)
		}
		for _, s := range addrs {
			if ip, err := netip.ParseAddr(s); err == nil {
				used[ip.Unmap()] = true
				tunnels++
			}
		}
	}
	rep.Nodes = len(nodes)
	fmt.Fprintf(out, "Found %d nodes and %d node tunnel IPs.\n\n", len(nodes), tunnels)

	fmt.Fprintln(out, "Loading all workload endpoints.")
	weps, _, err := s.client.List(ctx, datastore.ListOptions{Kind: v3.KindWorkloadEndpoint})
	if err != nil {
		return fmt.Errorf("listing workload endpoints: %w", err)
	}
	for _, r := range weps {
		for _, n := range r.(*v3.WorkloadEndpoint).Spec.IPNetworks {
			if p, err := netip.ParsePrefix(n); err == nil {
				used[p.Addr().Unmap()] = true
				rep.WorkloadIPs++
			} else if ip, err := netip.ParseAddr(n); err == nil {
				used[ip.Unmap()] = true
				rep.WorkloadIPs++
			}
		}
	}
	fmt.Fprintf(out, "Found %d workload IPs.\n\n", rep.WorkloadIPs)

	for _, b := range blocks {
		if b.Host != "" && !nodes[b.Host] {
			rep.MissingNodeBlocks = append(rep.MissingNodeBlocks, checkedBlock{CIDR: b.CIDR.String(), Node: b.Host})
		}
		for _, al := range b.Allocations {
			c := checkedIP{IP: al.IP.String(), Block: b.CIDR.String(), Handle: al.HandleID, Attrs: al.Attrs, NodeName: al.Attrs["node"]}
			if !used[al.IP] {
				rep.Leaked = append(rep.Leaked, c)
			}
			if c.NodeName != "" && !nodes[c.NodeName] {
				rep.MissingNodeIPs = append(rep.MissingNodeIPs, c)
			}
		}
	}
	rep.Problems = len(rep.Leaked) + len(rep.MissingNodeBlocks) + len(rep.MissingNodeIPs)

	fmt.Fprintln(out, "Scanning for IPs that are allocated but have no matching WorkloadEndpoint or node...")
	fmt.Fprintf(out, "Found %d IPs with no matching WorkloadEndpoint.\n", len(rep.Leaked))
	if o.showProblemIPs {
		writeProblemIPs(out, rep.Leaked)
	}
	fmt.Fprintln(out, "Scanning for blocks affine to nodes that do not exist...")
	fmt.Fprintf(out, "Found %d blocks affine to missing nodes.\n", len(rep.MissingNodeBlocks))
	if o.showProblemIPs {
		for _, b := range rep.MissingNodeBlocks {
			fmt.Fprintf(out, "  %s affine to missing node %s\n", b.CIDR, b.Node)
		}
	}
	fmt.Fprintln(out, "Scanning for IPs allocated to nodes that do not exist...")
	fmt.Fprintf(out, "Found %d IPs allocated to missing nodes.\n", len(rep.MissingNodeIPs))
	if o.showProblemIPs {
		writeProblemIPs(out, rep.MissingNodeIPs)
	}
	fmt.Fprintf(out, "\nCheck complete; found %d problems.\n", rep.Problems)

	if o.output != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.output, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing report: %w", err)
		}
		fmt.Fprintf(out, "Report written to %s\n", o.output)
	}
	return nil
}

// writeProblemIPs lists addresses with their handle and attributes.
func writeProblemIPs(out io.Writer, ips []checkedIP) {
	for _, c := range ips {
		var attrs []string
		for _, k := range slices.Sorted(maps.Keys(c.Attrs)) {
			attrs = append(attrs, k+"="+c.Attrs[k])
		}
		fmt.Fprintf(out, "  %s handle=%q %s\n", c.IP, c.Handle, strings.Join(attrs, " "))
	}
}
