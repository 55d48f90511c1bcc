package v3

// Kind names of profiles.
const (
	KindProfile     = "Profile"
	KindProfileList = "ProfileList"
)

// Profile is a set of rules and labels that endpoints refer to by name.
// Cluster-scoped.
type Profile struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata,omitempty"`
	Spec       ProfileSpec `json:"spec,omitempty"`
}

// ProfileSpec is the content of a profile.
type ProfileSpec struct {
	Ingress []Rule `json:"ingress,omitempty"`
	Egress  []Rule `json:"egress,omitempty"`
	// LabelsToApply are added to the labels of every endpoint using the
	// profile.
	LabelsToApply map[string]string `json:"labelsToApply,omitempty"`
}

// ProfileList is a list of profiles.
type ProfileList struct {
	TypeMeta `json:",inline"`
	ListMeta `json:"metadata,omitempty"`
	Items    []Profile `json:"items"`
}

// Resources implements List.
func (l *ProfileList) Resources() []Resource { return listResources(l.Items) }

// SetResources implements List.
func (l *ProfileList) SetResources(rs []Resource) (err error) {
	l.Items, err = listItems[Profile](KindProfileList, rs)
	return err
}

func init() {
	registerKind(KindInfo{
		Kind: KindProfile, ListKind: KindProfileList, Plural: "profiles", Stored: true,
		Aliases: []string{"profile", "profiles", "pro", "pros"},
		New:     func() Resource { return &Profile{TypeMeta: TypeMeta{Kind: KindProfile, APIVersion: APIVersion}} },
		NewList: func() List { return &ProfileList{TypeMeta: TypeMeta{Kind: KindProfileList, APIVersion: APIVersion}} },
	})
}
