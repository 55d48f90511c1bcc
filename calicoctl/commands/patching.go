package commands

import (
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// The patch types `calicoctl patch --type` takes, as kubectl names them.
const (
	patchStrategic = "strategic"
	patchMerge     = "merge"
	patchJSON      = "json"
)

// applyPatch applies patch to the JSON document original:
//
//   - strategic: a Kubernetes strategic merge patch over the Go type of
//     the resource (schema), as Calico's calicoctl does. Calico's types
//     name no merge strategies of their own, so this is a JSON merge
//     patch plus the `$patch`, `$retainKeys` and `$deleteFromPrimitiveList`
//     directives and the merge strategies of the object metadata
//     (finalizers are merged, ownerReferences merged by uid);
//   - merge: a JSON merge patch (RFC 7386);
//   - json: a JSON patch (RFC 6902), a list of operations.
func applyPatch(patchType string, original, patch []byte, schema v3.Resource) ([]byte, error) {
	switch patchType {
	case patchJSON:
		ops, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, fmt.Errorf("the patch is not a JSON patch (a list of operations): %w", err)
		}
		out, err := ops.Apply(original)
		if err != nil {
			return nil, fmt.Errorf("applying the JSON patch: %w", err)
		}
		return out, nil
	case patchMerge:
		out, err := jsonpatch.MergePatch(original, patch)
		if err != nil {
			return nil, fmt.Errorf("applying the JSON merge patch: %w", err)
		}
		return out, nil
	case patchStrategic:
		out, err := strategicpatch.StrategicMergePatch(original, patch, schema)
		if err != nil {
			return nil, fmt.Errorf("performing strategic merge patch: %w", err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("patch type %q is not supported: use strategic (the default), merge or json", patchType)
}
