package commands

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

type patchOptions struct {
	ns        nsOptions
	patch     string
	patchType string
}

func newPatchCommand(a *app) *cobra.Command {
	o := &patchOptions{}
	cmd := &cobra.Command{
		Use:   "patch KIND NAME -p PATCH",
		Short: "Patch a resource with a JSON merge patch",
		Long: `Patch one resource in place with a JSON merge patch (RFC 7386): objects
merge key by key, null removes a key, any other value replaces. The patched
resource is validated like any other write, and the write fails if the
resource changed since it was read.`,
		Example: `  calicoctl patch ippool pool-a -p '{"spec":{"disabled":true}}'`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.patchType != "merge" {
				return fmt.Errorf("patch type %q is not supported: only merge (a JSON merge patch) is", o.patchType)
			}
			if o.patch == "" {
				return fmt.Errorf("a patch is required: -p '{\"spec\":{...}}'")
			}
			var patch any
			if err := json.Unmarshal([]byte(o.patch), &patch); err != nil {
				return fmt.Errorf("patch is not valid JSON: %w", err)
			}
			if _, ok := patch.(map[string]any); !ok {
				return fmt.Errorf("patch must be a JSON object, got %s", o.patch)
			}
			info, err := kindArg(args[0])
			if err != nil {
				return err
			}
			named, err := namedResources(info, args[1:], &o.ns)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, closeFn, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			cur, err := c.Get(ctx, keyOf(named[0]))
			if err != nil {
				return fmt.Errorf("Failed to patch '%s' resource: %s", info.Kind, describe(err))
			}
			orig, err := toMap(cur)
			if err != nil {
				return err
			}
			merged, err := json.Marshal(mergePatch(orig, patch))
			if err != nil {
				return err
			}
			decoded, err := v3.Decode(merged)
			if err != nil {
				return fmt.Errorf("Failed to patch '%s' resource: the patched resource is invalid: %w", info.Kind, err)
			}
			if len(decoded) != 1 || decoded[0].GetTypeMeta().Kind != info.Kind {
				return fmt.Errorf("Failed to patch '%s' resource: the patch must not change the kind", info.Kind)
			}
			r := decoded[0]
			m, cm := r.GetObjectMeta(), cur.GetObjectMeta()
			if m.Name != cm.Name || m.Namespace != cm.Namespace {
				return fmt.Errorf("Failed to patch '%s' resource: the patch must not change metadata.name or metadata.namespace", info.Kind)
			}
			// The write is conditional on the version that was patched.
			m.ResourceVersion = cm.ResourceVersion
			if _, err := c.Update(ctx, r); err != nil {
				return fmt.Errorf("Failed to patch '%s' resource: %s", info.Kind, describe(err))
			}
			fmt.Fprintf(a.env.Out, "Successfully patched 1 '%s' resource\n", info.Kind)
			return nil
		},
	}
	o.ns.register(cmd, false)
	cmd.Flags().StringVarP(&o.patch, "patch", "p", "", "The JSON merge patch to apply to the resource.")
	cmd.Flags().StringVarP(&o.patchType, "type", "t", "merge", "Format of the patch: merge (JSON merge patch).")
	return cmd
}
