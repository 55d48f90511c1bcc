package v3

import "fmt"

// listResources returns pointers to the items of a list as Resources.
func listResources[T any, PT interface {
	*T
	Resource
}](items []T) []Resource {
	out := make([]Resource, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// listItems converts Resources back into list items, refusing any resource
// that is not of the list's item type.
func listItems[T any, PT interface {
	*T
	Resource
}](listKind string, rs []Resource) ([]T, error) {
	out := make([]T, 0, len(rs))
	for i, r := range rs {
		p, ok := r.(PT)
		if !ok {
			return nil, fmt.Errorf("%s item %d: is a %T, not a %T", listKind, i, r, PT(nil))
		}
		out = append(out, *p)
	}
	return out, nil
}
