package v3

import (
	"encoding/json"
	"fmt"
	"time"
)

// Group and version of every resource in this package.
const (
	Group      = "projectcalico.org"
	Version    = "v3"
	APIVersion = Group + "/" + Version
)

// TypeMeta is the kind and apiVersion every resource document carries.
type TypeMeta struct {
	Kind       string `json:"kind,omitempty"`
	APIVersion string `json:"apiVersion,omitempty"`
}

// GetTypeMeta gives access to the type metadata of any resource.
func (t *TypeMeta) GetTypeMeta() *TypeMeta { return t }

// ObjectMeta is the metadata of a resource. Namespace is set only on
// namespaced kinds.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	UID               string            `json:"uid,omitempty"`
	CreationTimestamp Time              `json:"creationTimestamp,omitzero"`

	// The fields below are Kubernetes object metadata that exports from
	// Calico (`kubectl get -o yaml`, `calicoctl get -o yaml`) carry. They
	// are accepted so such an export applies unchanged, and kept as given;
	// Palisade does not act on them (see docs/not-acted-on.md). The patch
	// tags are Kubernetes' own, so a strategic merge patch merges
	// ownerReferences and finalizers as it does on Calico's resources.
	GenerateName               string              `json:"generateName,omitempty"`
	SelfLink                   string              `json:"selfLink,omitempty"`
	Generation                 int64               `json:"generation,omitempty"`
	DeletionTimestamp          *Time               `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds *int64              `json:"deletionGracePeriodSeconds,omitempty"`
	OwnerReferences            []OwnerReference    `json:"ownerReferences,omitempty" patchStrategy:"merge" patchMergeKey:"uid"`
	Finalizers                 []string            `json:"finalizers,omitempty" patchStrategy:"merge"`
	ManagedFields              []ManagedFieldEntry `json:"managedFields,omitempty"`
}

// OwnerReference names an object that owns this one, as in Kubernetes.
type OwnerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
}

// ManagedFieldEntry is one server-side-apply field manager record, as in
// Kubernetes; FieldsV1 is kept as an opaque object.
type ManagedFieldEntry struct {
	Manager     string         `json:"manager,omitempty"`
	Operation   string         `json:"operation,omitempty"`
	APIVersion  string         `json:"apiVersion,omitempty"`
	Time        *Time          `json:"time,omitempty"`
	FieldsType  string         `json:"fieldsType,omitempty"`
	FieldsV1    map[string]any `json:"fieldsV1,omitempty"`
	Subresource string         `json:"subresource,omitempty"`
}

// GetObjectMeta gives access to the object metadata of any resource.
func (m *ObjectMeta) GetObjectMeta() *ObjectMeta { return m }

// ListMeta is the metadata of a list document.
type ListMeta struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// GetListMeta gives access to the list metadata of any list.
func (m *ListMeta) GetListMeta() *ListMeta { return m }

// Time is a timestamp serialised as RFC 3339 in UTC with second precision,
// as Kubernetes and Calico do.
type Time struct {
	time.Time
}

// NewTime wraps t, truncated to seconds.
func NewTime(t time.Time) Time { return Time{t.UTC().Truncate(time.Second)} }

// IsZero reports whether the time is unset.
func (t Time) IsZero() bool { return t.Time.IsZero() }

// MarshalJSON writes the time as an RFC 3339 string, or null when unset.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339))
}

// UnmarshalJSON reads an RFC 3339 string or null.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = Time{}
		return nil
	}
	// An RFC 3339 time has no characters JSON escapes, so the quotes are
	// stripped directly: this runs for every resource a List decodes.
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("timestamp must be an RFC 3339 string, got %s", b)
	}
	s := string(b[1 : len(b)-1])
	parsed, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("timestamp %q is not RFC 3339", s)
	}
	*t = Time{parsed.UTC()}
	return nil
}

// Resource is implemented by every resource type of this package (through
// the embedded TypeMeta and ObjectMeta).
type Resource interface {
	GetTypeMeta() *TypeMeta
	GetObjectMeta() *ObjectMeta
}

// List is implemented by every List kind of this package.
type List interface {
	GetTypeMeta() *TypeMeta
	GetListMeta() *ListMeta
	// Resources returns the items as Resources (pointers into the list).
	Resources() []Resource
	// SetResources replaces the items; each must be of the list's item kind.
	SetResources([]Resource) error
}
