package commands

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func newIPAMReleaseCommand(a *app) *cobra.Command {
	var ip string
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Release a Calico assigned IP address",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.ipamRelease(cmd.Context(), ip)
		},
	}
	cmd.Flags().StringVar(&ip, "ip", "", "IP address to release.")
	return cmd
}

func (a *app) ipamRelease(ctx context.Context, ipFlag string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ip, err := parseIPFlag(ipFlag)
	if err != nil {
		return err
	}
	s, err := a.connectIPAM(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	unallocated, err := s.alloc.ReleaseIPs(ctx, ip)
	if err != nil {
		return fmt.Errorf("releasing IP address %s: %w", ip, err)
	}
	if len(unallocated) > 0 {
		inPool, err := inAnyPool(ctx, s, ip)
		if err != nil {
			return err
		}
		if !inPool {
			return fmt.Errorf("IP address %s is not in any configured IP pool", ip)
		}
		return fmt.Errorf("IP address %s is not assigned", ip)
	}
	_, err = fmt.Fprintf(a.env.Out, "Successfully released IP address %s\n", ip)
	return err
}
