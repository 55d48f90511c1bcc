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
		Short: "Patch a resource in place",
		Long: `Patch one resource in place. --type says what the patch is:

  strategic  a strategic merge patch (the default, as in Calico's calicoctl):
             objects merge key by key, null removes a key, lists are
             replaced; metadata finalizers and ownerReferences are merged,
             and the $patch directives are honoured
  merge      a JSON merge patch (RFC 7386)
  json       a JSON patch (RFC 6902): a list of add, remove, replace, move,
             copy and test operations

The patched resource is validated like any other write, and the write fails
if the resource changed since it was read.`,
		Example: `  calicoctl patch ippool pool-a -p '{"spec":{"disabled":true}}'
  calicoctl patch ippool pool-a --type json -p '[{"op":"add","path":"/spec/natOutgoing","value":true}]'`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch o.patchType {
			case patchStrategic, patchMerge, patchJSON:
			default:
				return fmt.Errorf("patch type %q is not supported: use strategic (the default), merge or json", o.patchType)
			}
			if o.patch == "" {
				return fmt.Errorf("a patch is required: -p '{\"spec\":{...}}'")
			}
			var patch any
			if err := json.Unmarshal([]byte(o.patch), &patch); err != nil {
				return fmt.Errorf("patch is not valid JSON: %w", err)
			}
			if _, ok := patch.([]any); o.patchType == patchJSON && !ok {
				return fmt.Errorf("a JSON patch must be a JSON list of operations, got %s", o.patch)
			}
			if _, ok := patch.(map[string]any); o.patchType != patchJSON && !ok {
				return fmt.Errorf("a %s patch must be a JSON object, got %s", o.patchType, o.patch)
			}
			ctx := cmd.Context()
			f, err := a.fetchNamed(ctx, args[0], args[1], &o.ns, func(info v3.KindInfo, err error) error {
				return fmt.Errorf("Failed to patch '%s' resource: %s", info.Kind, describe(err))
			})
			if err != nil {
				return err
			}
			defer f.close()
			info, c, cur := f.info, f.c, f.r
			orig, err := json.Marshal(cur)
			if err != nil {
				return err
			}
			merged, err := applyPatch(o.patchType, orig, []byte(o.patch), info.New())
			if err != nil {
				return fmt.Errorf("Failed to patch '%s' resource: %w", info.Kind, err)
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
	cmd.Flags().StringVarP(&o.patch, "patch", "p", "", "The patch to apply to the resource, in JSON.")
	cmd.Flags().StringVarP(&o.patchType, "type", "t", patchStrategic, "Format of the patch: strategic (strategic merge patch), merge (JSON merge patch, RFC 7386) or json (JSON patch, RFC 6902).")
	return cmd
}
