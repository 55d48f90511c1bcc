package v3

import "github.com/palisade-net/palisade/libcalico/api/numorstring"

// Action is what a rule does with the traffic it matches.
type Action string

// Rule actions.
const (
	Allow Action = "Allow"
	Deny  Action = "Deny"
	Log   Action = "Log"
	Pass  Action = "Pass"
)

// Rule matches traffic on protocol, source and destination and applies an
// action to it. All the conditions given must match.
type Rule struct {
	Action Action `json:"action"`
	// IPVersion restricts the rule to IPv4 (4) or IPv6 (6) traffic.
	IPVersion *int `json:"ipVersion,omitempty"`
	// Protocol restricts the rule to one IP protocol.
	Protocol *numorstring.Protocol `json:"protocol,omitempty"`
	// ICMP restricts an ICMP or ICMPv6 rule to a type and code.
	ICMP *ICMPFields `json:"icmp,omitempty"`
	// NotProtocol excludes one IP protocol.
	NotProtocol *numorstring.Protocol `json:"notProtocol,omitempty"`
	// NotICMP excludes an ICMP type and code.
	NotICMP     *ICMPFields `json:"notICMP,omitempty"`
	Source      EntityRule  `json:"source"`
	Destination EntityRule  `json:"destination"`
	// HTTP matches on HTTP attributes (only enforced by an application
	// layer proxy).
	HTTP *HTTPMatch `json:"http,omitempty"`
	// Metadata carries annotations that do not change the rule's meaning.
	Metadata *RuleMetadata `json:"metadata,omitempty"`
}

// ICMPFields is an ICMP type and optional code.
type ICMPFields struct {
	Type *int `json:"type,omitempty"`
	Code *int `json:"code,omitempty"`
}

// EntityRule is one end (source or destination) of the traffic a rule
// matches.
type EntityRule struct {
	Nets              []string             `json:"nets,omitempty"`
	Selector          string               `json:"selector,omitempty"`
	NamespaceSelector string               `json:"namespaceSelector,omitempty"`
	Services          *ServiceMatch        `json:"services,omitempty"`
	Ports             []numorstring.Port   `json:"ports,omitempty"`
	NotNets           []string             `json:"notNets,omitempty"`
	NotSelector       string               `json:"notSelector,omitempty"`
	NotPorts          []numorstring.Port   `json:"notPorts,omitempty"`
	ServiceAccounts   *ServiceAccountMatch `json:"serviceAccounts,omitempty"`
}

// ServiceMatch names a Kubernetes Service whose endpoints are matched.
type ServiceMatch struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// ServiceAccountMatch matches endpoints by their Kubernetes service account.
type ServiceAccountMatch struct {
	Names    []string `json:"names,omitempty"`
	Selector string   `json:"selector,omitempty"`
}

// HTTPMatch matches HTTP requests by method and path.
type HTTPMatch struct {
	Methods []string   `json:"methods,omitempty"`
	Paths   []HTTPPath `json:"paths,omitempty"`
}

// HTTPPath is an exact or prefix match on an HTTP path; exactly one is set.
type HTTPPath struct {
	Exact  string `json:"exact,omitempty"`
	Prefix string `json:"prefix,omitempty"`
}

// RuleMetadata is free-form data attached to a rule.
type RuleMetadata struct {
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PolicyType is the direction of traffic a policy applies to.
type PolicyType string

// Policy types.
const (
	PolicyTypeIngress PolicyType = "Ingress"
	PolicyTypeEgress  PolicyType = "Egress"
)

// PolicyPerformanceHint is a hint that changes how a policy is programmed
// but not what it means.
type PolicyPerformanceHint string

// Performance hints.
const (
	PerfHintAssumeNeededOnEveryNode PolicyPerformanceHint = "AssumeNeededOnEveryNode"
)
