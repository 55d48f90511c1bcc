package commands

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

type ipamConfigureOptions struct {
	strictAffinity     string
	maxBlocksPerHost   int
	autoAllocateBlocks string
}

func newIPAMConfigureCommand(a *app) *cobra.Command {
	o := &ipamConfigureOptions{}
	cmd := &cobra.Command{
		Use:   "configure",
		Short: "Configure IPAM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.ipamConfigure(cmd.Context(), o, cmd.Flags().Changed("max-blocks-per-host"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.strictAffinity, "strictaffinity", "", "Set StrictAffinity to true/false. When StrictAffinity is true, borrowing IP addresses is not allowed.")
	f.IntVar(&o.maxBlocksPerHost, "max-blocks-per-host", 0, "Set the maximum number of blocks that can be affine to a host (0: no limit).")
	f.StringVar(&o.autoAllocateBlocks, "autoallocateblocks", "", "Set AutoAllocateBlocks to true/false. When false, nodes claim no new blocks.")
	return cmd
}

func (a *app) ipamConfigure(ctx context.Context, o *ipamConfigureOptions, maxSet bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.strictAffinity == "" && !maxSet && o.autoAllocateBlocks == "" {
		return fmt.Errorf("nothing to configure: give --strictaffinity=<true/false>, --max-blocks-per-host=<number> or --autoallocateblocks=<true/false>")
	}
	parse := func(flag, v string) (bool, error) {
		b, err := strconv.ParseBool(v)
		if err != nil || (v != "true" && v != "false") {
			return false, fmt.Errorf("--%s=%q: must be true or false", flag, v)
		}
		return b, nil
	}
	var strict, auto bool
	var err error
	if o.strictAffinity != "" {
		if strict, err = parse("strictaffinity", o.strictAffinity); err != nil {
			return err
		}
	}
	if o.autoAllocateBlocks != "" {
		if auto, err = parse("autoallocateblocks", o.autoAllocateBlocks); err != nil {
			return err
		}
	}
	if maxSet && o.maxBlocksPerHost < 0 {
		return fmt.Errorf("--max-blocks-per-host=%d: must not be negative", o.maxBlocksPerHost)
	}
	s, err := a.connectIPAM(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	cfg, err := s.alloc.GetConfig(ctx)
	if err != nil {
		return err
	}
	if o.strictAffinity != "" {
		cfg.StrictAffinity = strict
	}
	if o.autoAllocateBlocks != "" {
		cfg.AutoAllocateBlocks = auto
	}
	if maxSet {
		cfg.MaxBlocksPerHost = o.maxBlocksPerHost
	}
	if err := s.alloc.SetConfig(ctx, cfg); err != nil {
		return err
	}
	out := a.env.Out
	if o.strictAffinity != "" {
		fmt.Fprintf(out, "Successfully set StrictAffinity to: %t\n", cfg.StrictAffinity)
	}
	if o.autoAllocateBlocks != "" {
		fmt.Fprintf(out, "Successfully set AutoAllocateBlocks to: %t\n", cfg.AutoAllocateBlocks)
	}
	if maxSet {
		fmt.Fprintf(out, "Successfully set MaxBlocksPerHost to: %d\n", cfg.MaxBlocksPerHost)
	}
	return nil
}
