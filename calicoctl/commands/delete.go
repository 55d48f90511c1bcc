package commands

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

type deleteOptions struct {
	files         fileOptions
	ns            nsOptions
	skipNotExists bool
}

func newDeleteCommand(a *app) *cobra.Command {
	o := &deleteOptions{}
	cmd := &cobra.Command{
		Use:   "delete ( KIND NAME... | -f FILENAME )",
		Short: "Delete resources by filename, stdin, or kind and names",
		Long: `Delete a set of resources by filename or stdin, or by kind and names.
Deleting a resource that does not exist is an error unless --skip-not-exists
is set; skipped resources count as deleted. Deleting a Node also releases
its workload and tunnel addresses and block affinities and deletes its
WorkloadEndpoints, HostEndpoints, node-specific BGPPeers and node.<name>
configurations, as Calico's calicoctl does.`,
		Example: "  calicoctl delete ippool pool-a pool-b\n  calicoctl delete -f ./policy.yaml",
		RunE: func(cmd *cobra.Command, args []string) error {
			_, rs, err := loadTargets(a.env.In, &o.files, &o.ns, args, targetForm{
				byName:  "KIND NAME...",
				minArgs: 2, tooFew: "delete needs a kind and at least one name, or -f FILENAME",
				fileNSFailed: "Failed to execute command",
			})
			if err != nil {
				return err
			}
			if len(rs) == 0 {
				fmt.Fprintln(a.env.Out, "No resources specified")
				return nil
			}
			s, err := a.connectIPAM(cmd.Context())
			if err != nil {
				return err
			}
			defer s.close()
			out := outcome{total: len(rs), kind: singleKind(rs)}
			for _, r := range rs {
				err := deleteOne(cmd.Context(), s, keyOf(r))
				var bv *datastore.BadValueError
				switch {
				case err == nil, o.skipNotExists && errors.Is(err, datastore.ErrNotFound):
					out.handled++
				case errors.As(err, &bv) && bv.Deleted:
					// Deleted; what it held could not be read.
					fmt.Fprintf(a.env.ErrOut, "Deleted %s\n", bv)
					out.handled++
				default:
					out.errs = append(out.errs, err)
				}
			}
			if out.handled > 0 {
				if out.kind != "" {
					fmt.Fprintf(a.env.Out, "Successfully deleted %d '%s' resource(s)\n", out.handled, out.kind)
				} else {
					fmt.Fprintf(a.env.Out, "Successfully deleted %d resource(s)\n", out.handled)
				}
			}
			if len(out.errs) == 0 {
				return nil
			}
			lines := make([]string, len(out.errs))
			for i, e := range out.errs {
				if out.kind != "" {
					lines[i] = fmt.Sprintf("Failed to delete '%s' resource: %s", out.kind, describe(e))
				} else {
					lines[i] = fmt.Sprintf("Failed to delete resource: %s", describe(e))
				}
			}
			return errors.New(strings.Join(lines, "\n"))
		},
	}
	o.files.register(cmd, "delete")
	o.ns.register(cmd, false)
	cmd.Flags().BoolVar(&o.skipNotExists, "skip-not-exists", false, "Skip over and treat as successful any attempts to delete an entry that does not exist.")
	return cmd
}
