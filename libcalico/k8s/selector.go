package k8s

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// selectorKind says what a Kubernetes label selector selects.
type selectorKind int

const (
	selectPods selectorKind = iota
	selectNamespaces
)

// orchestratorSelector restricts a pod selector to Kubernetes pods.
const orchestratorSelector = LabelOrchestrator + " == '" + OrchestratorKubernetes + "'"

// labelKeyRE and labelValueRE are what Kubernetes accepts as a label key
// (an optional DNS prefix and a name) and value; nothing else may reach a
// Calico selector, where a quote or an operator would change its meaning.
var (
	labelKeyRE   = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
)

// selector renders a Kubernetes label selector as a Calico selector, as
// Calico does: a pod selector always starts with the orchestrator term (so
// a nil or empty one selects every pod); a nil namespace selector is ""
// (the policy's own namespace) and an empty one all(); matchLabels in key
// order, then matchExpressions in their order. An operator, key or value
// Kubernetes does not accept is an error: nothing unknown is guessed.
func selector(s *metav1.LabelSelector, kind selectorKind) (string, error) {
	var terms []string
	if kind == selectPods {
		terms = append(terms, orchestratorSelector)
	}
	if s == nil {
		return strings.Join(terms, " && "), nil
	}
	if kind == selectNamespaces && len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
		return "all()", nil
	}
	checkKey := func(k string) error {
		if !labelKeyRE.MatchString(k) {
			return fmt.Errorf("label key %q is not a Kubernetes label key", k)
		}
		return nil
	}
	checkValue := func(k, v string) error {
		if !labelValueRE.MatchString(v) {
			return fmt.Errorf("label %s: value %q is not a Kubernetes label value", k, v)
		}
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		v := s.MatchLabels[k]
		if err := checkKey(k); err != nil {
			return "", err
		}
		if err := checkValue(k, v); err != nil {
			return "", err
		}
		terms = append(terms, fmt.Sprintf("%s == '%s'", k, v))
	}
	for _, e := range s.MatchExpressions {
		if err := checkKey(e.Key); err != nil {
			return "", err
		}
		for _, v := range e.Values {
			if err := checkValue(e.Key, v); err != nil {
				return "", err
			}
		}
		values := strings.Join(e.Values, "', '")
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			terms = append(terms, fmt.Sprintf("%s in { '%s' }", e.Key, values))
		case metav1.LabelSelectorOpNotIn:
			terms = append(terms, fmt.Sprintf("%s not in { '%s' }", e.Key, values))
		case metav1.LabelSelectorOpExists:
			terms = append(terms, fmt.Sprintf("has(%s)", e.Key))
		case metav1.LabelSelectorOpDoesNotExist:
			terms = append(terms, fmt.Sprintf("! has(%s)", e.Key))
		default:
			return "", fmt.Errorf("label selector operator %q on %s is not one of In, NotIn, Exists, DoesNotExist", e.Operator, e.Key)
		}
	}
	return strings.Join(terms, " && "), nil
}
