package bpf

// Slot is one counter slot of a loaded policy program: a rule, or an
// implicit end. The compiler (felix/dataplane/bpf/policy) fills it; dumps
// (bpf/inspect) and a restarted felix read it back from the program's
// Description.
type Slot struct {
	Slot int `json:"slot"`
	// ID is the rule's stable identity and its counters' key
	// (policy.RuleID).
	ID uint64 `json:"id"`
	// Tier and Policy, or Profile, name where the rule is; Rule is its
	// position among the stage's rules of the policy, -1 for an implicit
	// end. Namespace and Name are the policy's (Namespace empty for a
	// GlobalNetworkPolicy); Index is the rule's index in its policy or
	// profile as written (calc.Rule.Index), -1 for an implicit end.
	Tier      string `json:"tier,omitempty"`
	Policy    string `json:"policy,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Profile   string `json:"profile,omitempty"`
	Rule      int    `json:"rule"`
	Index     int    `json:"index"`
	// Action is Allow, Deny, Pass or Log (implicit ends: Deny or None).
	Action string `json:"action"`
	// Match says what the rule matches, or why the walk ended there.
	Match string `json:"match"`
}

// Description is what a loaded policy program carries about itself (bound
// to it in a frozen map, read with ProgramInfo): read by dumps and by a
// restarted felix.
type Description struct {
	Hash  string `json:"hash"`
	Slots []Slot `json:"slots"`
	// Engine marks the stub of a policy engine stage: the stage's data
	// is in MapPolicy, bound to the program's slot.
	Engine bool `json:"engine,omitempty"`
}
