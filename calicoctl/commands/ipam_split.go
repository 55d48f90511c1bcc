package commands

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

func newIPAMSplitCommand(a *app) *cobra.Command {
	var cidr, name string
	cmd := &cobra.Command{
		Use:   "split NUMBER (--cidr=CIDR | --name=POOL_NAME)",
		Short: "Split an IP pool into smaller pools of equal size",
		Long: `Split the IP pool named by --name, or whose CIDR is --cidr, into NUMBER
smaller IP pools of equal size (NUMBER a power of 2). Each new pool is named
split-<pool>-<i>, keeps the pool's settings and is enabled; the pool is
replaced by them in one transaction, so allocations carry on unharmed and
no datastore lock is needed.`,
		Example: "  calicoctl ipam split --cidr=172.16.0.0/16 2\n  calicoctl ipam split --name=default-ipv4-ippool 4",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.ipamSplit(cmd.Context(), args[0], cidr, name)
		},
	}
	cmd.Flags().StringVar(&cidr, "cidr", "", "CIDR of the IP pool to split.")
	cmd.Flags().StringVar(&name, "name", "", "Name of the IP pool to split.")
	return cmd
}

// ipamSplit splits one pool, with the messages of Calico's calicoctl.
func (a *app) ipamSplit(ctx context.Context, number, cidr, name string) error {
	parts, err := strconv.Atoi(number)
	if err != nil {
		return fmt.Errorf("error reading number to split IP pools into. %s is not a valid number: %v", number, err)
	}
	if cidr == "" && name == "" {
		return fmt.Errorf("no name or CIDR provided. Provide a name or CIDR to denote the IP pool to split")
	}
	s, err := a.connectIPAM(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	pool, err := findPool(ctx, s.client, cidr, name)
	if err != nil {
		return err
	}
	if c, err := netip.ParsePrefix(pool.Spec.CIDR); err == nil {
		if _, err := client.SplitCIDR(c, parts); err != nil {
			return fmt.Errorf("error splitting the CIDR %s into %d CIDRs: %v", pool.Spec.CIDR, parts, err)
		}
	}
	children, err := s.client.SplitIPPool(ctx, s.kv, pool, parts)
	if err != nil {
		return fmt.Errorf("error splitting IP pool %s: %s", pool.Name, describe(err))
	}
	fmt.Fprintf(a.env.Out, "IP Pool %s was successfully split into %d smaller pools.\n", pool.Name, parts)
	for _, ch := range children {
		fmt.Fprintf(a.env.Out, "Created %s with CIDR %s.\n", ch.Name, ch.Spec.CIDR)
	}
	return nil
}

// findPool reads the pool named name or, without a name, the pool whose
// CIDR is cidr.
func findPool(ctx context.Context, c *client.Client, cidr, name string) (*v3.IPPool, error) {
	if name != "" {
		r, err := c.Get(ctx, datastore.Key{Kind: v3.KindIPPool, Name: name})
		if err != nil {
			return nil, fmt.Errorf("unable to find IP pool with name %s: %s", name, describe(err))
		}
		return r.(*v3.IPPool), nil
	}
	want, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("unable to find IP pool %s covering the specified CIDR %s", name, cidr)
	}
	pools, _, err := c.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		return nil, fmt.Errorf("unable to list IP pools to find the pool specified by %s", cidr)
	}
	for _, r := range pools {
		p := r.(*v3.IPPool)
		if got, err := netip.ParsePrefix(p.Spec.CIDR); err == nil && got.Masked() == want.Masked() {
			return p, nil
		}
	}
	return nil, fmt.Errorf("unable to find IP pool %s covering the specified CIDR %s", name, cidr)
}
