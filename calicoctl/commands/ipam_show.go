package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net/netip"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

type ipamShowOptions struct {
	ip                string
	showBlocks        bool
	showBorrowed      bool
	showConfiguration bool
}

func newIPAMShowCommand(a *app) *cobra.Command {
	o := &ipamShowOptions{}
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show details of an assigned IP address, or of overall IP usage",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.ipamShow(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ip, "ip", "", "Report whether this specific IP address is in use.")
	f.BoolVar(&o.showBlocks, "show-blocks", false, "Show detailed information for IP blocks as well as pools.")
	f.BoolVar(&o.showBorrowed, "show-borrowed", false, `Show detailed information for "borrowed" IP addresses.`)
	f.BoolVar(&o.showConfiguration, "show-configuration", false, "Show current Calico IPAM configuration.")
	return cmd
}

func (a *app) ipamShow(ctx context.Context, o *ipamShowOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var ip netip.Addr
	if o.ip != "" {
		var err error
		if ip, err = parseIPFlag(o.ip); err != nil {
			return err
		}
	}
	s, err := a.connectIPAM(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	out := a.env.Out
	switch {
	case ip.IsValid():
		return showIP(ctx, out, s, ip)
	case o.showConfiguration:
		return showConfiguration(ctx, out, s)
	case o.showBorrowed:
		return showBorrowed(ctx, out, s)
	}
	return showUsage(ctx, out, s, o.showBlocks)
}

// showIP reports who holds one address.
func showIP(ctx context.Context, out io.Writer, s *ipamSession, ip netip.Addr) error {
	al, err := s.alloc.GetAssignmentAttributes(ctx, ip)
	if errors.Is(err, ipam.ErrNotAssigned) {
		inPool, perr := inAnyPool(ctx, s, ip)
		if perr != nil {
			return perr
		}
		if !inPool {
			return fmt.Errorf("IP %s is not in any configured IP pool", ip)
		}
		if errors.Is(err, ipam.ErrCoolingDown) {
			// Released under ipCooldownSeconds.
			_, err = fmt.Fprintf(out, "IP %s is not currently assigned (cooling down after its release)\n", ip)
			return err
		}
		_, err = fmt.Fprintf(out, "IP %s is not currently assigned\n", ip)
		return err
	}
	if err != nil {
		return fmt.Errorf("IP %s: %w", ip, err)
	}
	fmt.Fprintf(out, "IP %s is in use\n", ip)
	if al.IsSticky() {
		user := "not used by a pod now"
		if al.InUse() {
			user = "used by container " + al.Attrs[ipam.AttrContainer] + " on node " + al.Attrs[ipam.AttrNode]
		}
		fmt.Fprintf(out, "Reserved (%s) for pod %s/%s of %s %s; %s\n", al.Attrs[ipam.AttrReleasePolicy], al.Attrs["namespace"], al.Attrs["pod"],
			al.Attrs[ipam.AttrOwnerKind], al.Attrs[ipam.AttrOwnerName], user)
	}
	if al.IsLoadBalancer() {
		ns, name := al.LoadBalancerService()
		fmt.Fprintf(out, "LoadBalancer address of Service %s/%s\n", ns, name)
	}
	if al.HandleID != "" {
		fmt.Fprintf(out, "Handle ID: %s\n", al.HandleID)
	}
	if len(al.Attrs) > 0 {
		fmt.Fprintln(out, "Attributes:")
		for _, k := range slices.Sorted(maps.Keys(al.Attrs)) {
			fmt.Fprintf(out, "  %s: %s\n", k, al.Attrs[k])
		}
	}
	return nil
}

// inAnyPool reports whether some IP pool holds ip.
func inAnyPool(ctx context.Context, s *ipamSession, ip netip.Addr) (bool, error) {
	pools, _, err := s.client.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		return false, fmt.Errorf("listing IP pools: %w", err)
	}
	for _, r := range pools {
		if c, err := netip.ParsePrefix(r.(*v3.IPPool).Spec.CIDR); err == nil && c.Contains(ip) {
			return true, nil
		}
	}
	return false, nil
}

// showUsage prints the per-pool (and with blocks, per-block) table.
func showUsage(ctx context.Context, out io.Writer, s *ipamSession, blocks bool) error {
	pools, err := s.alloc.GetUtilization(ctx, ipam.UtilizationOptions{})
	if err != nil {
		return fmt.Errorf("reading IP usage: %w", err)
	}
	t := boxTable{headers: []string{"GROUPING", "CIDR", "IPS TOTAL", "IPS IN USE", "IPS FREE"}, right: map[int]bool{2: true}}
	for _, p := range pools {
		total := poolSize(p.CIDR)
		inUse := new(big.Int).SetUint64(p.InUse)
		t.rows = append(t.rows, usageRow("IP Pool", p.CIDR.String(), total, inUse))
		if !blocks {
			continue
		}
		for _, b := range p.Blocks {
			t.rows = append(t.rows, usageRow("Block", b.CIDR.String(), big.NewInt(int64(b.Capacity)), big.NewInt(int64(b.InUse))))
		}
	}
	if _, err = io.WriteString(out, t.String()); err != nil {
		return err
	}
	return showReservedCount(ctx, out, s)
}

// showReservedCount says how many of the addresses in use are Services'
// LoadBalancer addresses and sticky reservations (each printed only when
// there are any).
func showReservedCount(ctx context.Context, out io.Writer, s *ipamSession) error {
	blocks, err := s.alloc.ListBlocks(ctx)
	if err != nil {
		return fmt.Errorf("listing IPAM blocks: %w", err)
	}
	reserved, idle, lb := 0, 0, 0
	for _, b := range blocks {
		for _, al := range b.Allocations {
			if al.IsLoadBalancer() {
				lb++
			}
			if al.IsSticky() {
				reserved++
				if !al.InUse() {
					idle++
				}
			}
		}
	}
	if lb > 0 {
		fmt.Fprintf(out, "%d of the IPs in use are LoadBalancer addresses of Services.\n", lb)
	}
	if reserved == 0 {
		return nil
	}
	_, err = fmt.Fprintf(out, "%d of the IPs in use are sticky reservations (ipReleasePolicy), %d of them used by no pod now.\n", reserved, idle)
	return err
}

// poolSize is the number of addresses in a prefix.
func poolSize(p netip.Prefix) *big.Int {
	return new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
}

// usageRow formats one line: counts exactly up to 2^53, then in Calico's
// short floating form (1.2089e+24); percentages rounded.
func usageRow(grouping, cidr string, total, inUse *big.Int) []string {
	free := new(big.Int).Sub(total, inUse)
	ft, _ := new(big.Float).SetInt(total).Float64()
	pct := func(n *big.Int) string {
		f, _ := new(big.Float).SetInt(n).Float64()
		return strconv.FormatFloat(100*f/ft, 'f', 0, 64) + "%"
	}
	return []string{
		grouping, cidr, count(total),
		count(inUse) + " (" + pct(inUse) + ")",
		count(free) + " (" + pct(free) + ")",
	}
}

// count prints an address count.
func count(n *big.Int) string {
	if n.BitLen() <= 53 {
		return n.String()
	}
	f, _ := new(big.Float).SetInt(n).Float64()
	return strconv.FormatFloat(f, 'g', 5, 64)
}

// showConfiguration prints the IPAM configuration.
func showConfiguration(ctx context.Context, out io.Writer, s *ipamSession) error {
	cfg, err := s.alloc.GetConfig(ctx)
	if err != nil {
		return err
	}
	t := boxTable{headers: []string{"PROPERTY", "VALUE"}, rows: [][]string{
		{"StrictAffinity", strconv.FormatBool(cfg.StrictAffinity)},
		{"AutoAllocateBlocks", strconv.FormatBool(cfg.AutoAllocateBlocks)},
		{"MaxBlocksPerHost", strconv.Itoa(cfg.MaxBlocksPerHost)},
	}}
	_, err = io.WriteString(out, t.String())
	return err
}

// showBorrowed lists addresses used by a node other than their block's.
func showBorrowed(ctx context.Context, out io.Writer, s *ipamSession) error {
	blocks, err := s.alloc.ListBlocks(ctx)
	if err != nil {
		return fmt.Errorf("listing blocks: %w", err)
	}
	t := boxTable{headers: []string{"IP", "BORROWING-NODE", "BLOCK", "BLOCK OWNER", "TYPE", "ALLOCATED-TO"}}
	for _, b := range blocks {
		for _, al := range b.Allocations {
			node := al.Attrs["node"]
			if node == "" || node == b.Host {
				continue
			}
			t.rows = append(t.rows, []string{al.IP.String(), node, b.CIDR.String(), b.Host, allocationType(al), allocatedTo(al)})
		}
	}
	_, err = io.WriteString(out, t.String())
	return err
}

// allocationType is what an allocation is for, from its attributes.
func allocationType(al ipam.Allocation) string {
	switch {
	case al.Attrs["type"] != "":
		return al.Attrs["type"]
	case al.Attrs["pod"] != "":
		return "pod"
	}
	return "unknown"
}

// allocatedTo names the holder: namespace/pod, else the handle.
func allocatedTo(al ipam.Allocation) string {
	if al.Attrs["pod"] != "" {
		return al.Attrs["namespace"] + "/" + al.Attrs["pod"]
	}
	if al.Attrs["node"] != "" && al.Attrs["type"] != "" {
		return al.Attrs["node"]
	}
	return al.HandleID
}
