package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

type ipamReleaseOptions struct {
	ip      string
	reports []string
	force   bool
}

func newIPAMReleaseCommand(a *app) *cobra.Command {
	o := &ipamReleaseOptions{}
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Release a Calico assigned IP address",
		Long: `Release an IP address (--ip) from IPAM, or every leaked address and handle of
one or more reports of ` + "`ipam check -o`" + ` (--from-report, repeatable: only what
every report calls leaked is released, so reports taken some time apart give
more certainty; at least one must be current). An address is released only
while the allocation the report saw still holds it. This does not remove the
address from an endpoint that uses it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(o.reports) > 0 {
				return a.ipamReleaseFromReports(cmd.Context(), o)
			}
			return a.ipamRelease(cmd.Context(), o.ip)
		},
	}
	cmd.Flags().StringVar(&o.ip, "ip", "", "IP address to release.")
	cmd.Flags().StringArrayVar(&o.reports, "from-report", nil,
		"Release all leaked addresses from the report. If given more than once, only leaked IPs common to all reports are released.")
	cmd.Flags().BoolVar(&o.force, "force", false, "Force release of leaked addresses (a report of another calicoctl version, a datastore that is not locked).")
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

// ipamReleaseFromReports releases what reports of `ipam check` agree is
// leaked, after Calico's checks: the reports are of this cluster (never
// overridden), of this calicoctl version and taken while the datastore
// was locked (both overridden by --force), and one of them is current.
func (a *app) ipamReleaseFromReports(ctx context.Context, o *ipamReleaseOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.ip != "" {
		return fmt.Errorf("give either --ip or --from-report, not both")
	}
	out := a.env.Out
	s, err := a.connectIPAM(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	var info v3.ClusterInformation
	r, err := s.client.Get(ctx, datastore.Key{Kind: v3.KindClusterInformation, Name: "default"})
	switch {
	case err == nil:
		info = *r.(*v3.ClusterInformation)
	case !errors.Is(err, datastore.ErrNotFound):
		return fmt.Errorf("reading ClusterInformation default: %w", err)
	}
	var reports []checkReport
	current := false
	for _, file := range o.reports {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("reading report: %w", err)
		}
		var rep checkReport
		if err := json.Unmarshal(data, &rep); err != nil {
			return fmt.Errorf("report %s: %w", file, err)
		}
		if rep.ClusterGUID != info.Spec.ClusterGUID {
			return fmt.Errorf("cluster does not match the provided report (%s): mismatched cluster GUID. Refusing to release", file)
		}
		if v := buildinfo.Get().Version; rep.Version != v {
			if !o.force {
				return fmt.Errorf("the provided report (%s) was produced using a different version (%s) of calicoctl. Refusing to release", file, rep.Version)
			}
			fmt.Fprintln(out, "WARNING: Report was produced using a different version of calicoctl. Ignoring due to --force option")
		}
		current = current || rep.ClusterInfoRevision == info.ResourceVersion
		reports = append(reports, rep)
	}
	if !current {
		return fmt.Errorf("the provided reports are all stale - at least one should be up-to-date. Please generate a new report while the data store is locked and try again")
	}
	if info.Spec.DatastoreReady == nil || *info.Spec.DatastoreReady {
		if !o.force {
			return fmt.Errorf("data store is not locked. Either lock the data store, or re-run with --force")
		}
		fmt.Fprintln(out, "WARNING: Data store is not locked. Ignoring due to --force option")
	}

	ips, handles := mergeReports(reports)
	if len(ips) > 0 {
		fmt.Fprintf(out, "Releasing %d old IPs...\n", len(ips))
		unallocated, err := s.alloc.Release(ctx, ips...)
		if err != nil {
			fmt.Fprintf(out, "An error occurred while releasing some IPs: %s.  "+
				"Problems are often caused by an out-of-date IPAM report.  Try regenerating the IPAM report and retry.\n", err)
		} else {
			fmt.Fprintf(out, "Released %d IPs successfully\n", len(ips)-len(unallocated))
		}
		if len(unallocated) != 0 {
			fmt.Fprintf(out, "%d addresses marked as leaked in the report had already been cleaned up.\n", len(unallocated))
		}
	} else {
		fmt.Fprintln(out, "Report didn't contain any leaked IPs to clean up.")
	}
	if len(handles) > 0 {
		fmt.Fprintf(out, "Deleting %d handles...\n", len(handles))
		fmt.Fprintln(out, "Key: '.' = Deleted OK; 'x' = skip, handle missing/changed.")
		released, skipped, failed := 0, 0, 0
		for _, h := range handles {
			rev, _ := strconv.ParseInt(h.Revision, 10, 64)
			err := s.alloc.DeleteHandle(ctx, h.ID, rev)
			switch {
			case err == nil:
				released++
				fmt.Fprint(out, ".")
			case errors.Is(err, datastore.ErrNotFound), errors.Is(err, datastore.ErrConflict):
				skipped++
				fmt.Fprint(out, "x")
			default:
				failed++
				fmt.Fprintf(out, "\nDeleting handle %s failed: %s.\n", h.ID, err)
			}
		}
		fmt.Fprintln(out)
		fmt.Fprintf(out, "Released %d handles; %d skipped; %d errors.\n", released, skipped, failed)
	} else {
		fmt.Fprintln(out, "Report didn't contain any handles to clean up.")
	}
	fmt.Fprintln(out, "You may now unlock the data store.")
	return nil
}

// mergeReports returns what every report calls leaked: the allocations
// not in use, the same allocation (handle and sequence number, which the
// release checks) in each report, and the leaked handles at the same
// revision in each, in a stable order.
func mergeReports(reports []checkReport) ([]ipam.ReleaseOptions, []checkHandle) {
	var ips map[string]ipam.ReleaseOptions
	var handles map[string]checkHandle
	for _, rep := range reports {
		merged := map[string]ipam.ReleaseOptions{}
		for _, als := range rep.Allocations {
			for _, al := range als {
				if al.InUse || al.Reserved != "" {
					continue // in use, or a sticky reservation kept for its pod
				}
				addr, err := netip.ParseAddr(al.IP)
				if err != nil {
					continue
				}
				opt := ipam.ReleaseOptions{Address: addr, Handle: al.Handle, SequenceNumber: al.SequenceNumber}
				if old, ok := ips[al.IP]; ips != nil && (!ok || !sameAllocation(old, opt)) {
					continue
				}
				merged[al.IP] = opt
			}
		}
		ips = merged
		mh := map[string]checkHandle{}
		for _, h := range rep.LeakedHandles {
			if old, ok := handles[h.ID]; handles == nil || (ok && old.Revision == h.Revision) {
				mh[h.ID] = h
			}
		}
		handles = mh
	}
	var outIPs []ipam.ReleaseOptions
	for _, k := range slices.Sorted(maps.Keys(ips)) {
		outIPs = append(outIPs, ips[k])
	}
	var outHandles []checkHandle
	for _, k := range slices.Sorted(maps.Keys(handles)) {
		outHandles = append(outHandles, handles[k])
	}
	return outIPs, outHandles
}

// sameAllocation reports whether two reports saw the same allocation of
// an address.
func sameAllocation(a, b ipam.ReleaseOptions) bool {
	if a.Handle != b.Handle || (a.SequenceNumber == nil) != (b.SequenceNumber == nil) {
		return false
	}
	return a.SequenceNumber == nil || *a.SequenceNumber == *b.SequenceNumber
}
