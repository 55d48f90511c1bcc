package commands

import (
	"fmt"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// nsOptions are the -n and -A flags.
type nsOptions struct {
	namespace     string
	allNamespaces bool
}

func (n *nsOptions) register(cmd *cobra.Command, withAll bool) {
	cmd.Flags().StringVarP(&n.namespace, "namespace", "n", "",
		"Namespace of the resource. Only applicable to namespaced kinds (NetworkPolicy, NetworkSet, WorkloadEndpoint...). Uses the default namespace if not specified.")
	if withAll {
		cmd.Flags().BoolVarP(&n.allNamespaces, "all-namespaces", "A", false,
			"If present, list the requested object(s) across all namespaces.")
	}
}

// applyAll settles the namespace of every resource read from files.
func (n *nsOptions) applyAll(rs []v3.Resource) error {
	for _, r := range rs {
		if err := n.apply(r); err != nil {
			return err
		}
	}
	return nil
}

// apply settles the namespace of r from the resource and the flags, as
// Calico does: the flag fills an empty namespace, "default" is the
// fallback, -A clears it (to list every namespace), and a namespace on a
// cluster-scoped kind is an error.
func (n *nsOptions) apply(r v3.Resource) error {
	info, ok := v3.KindByName(r.GetTypeMeta().Kind)
	if !ok {
		return fmt.Errorf("resource type '%s' is not supported", r.GetTypeMeta().Kind)
	}
	m := r.GetObjectMeta()
	if !info.Namespaced {
		if m.Namespace != "" {
			return fmt.Errorf("namespace should not be specified for a non-namespaced resource. %s is not a namespaced resource", info.Kind)
		}
		if n.allNamespaces || n.namespace != "" {
			return fmt.Errorf("%s is not namespaced", info.Kind)
		}
		return nil
	}
	switch {
	case n.allNamespaces && n.namespace != "":
		return fmt.Errorf("cannot use both --namespace and --all-namespaces flags at the same time")
	case n.allNamespaces:
		m.Namespace = ""
	case m.Namespace == "" && n.namespace != "":
		m.Namespace = n.namespace
	case m.Namespace == "":
		m.Namespace = "default"
	case n.namespace != "" && m.Namespace != n.namespace:
		return fmt.Errorf("resource namespace does not match client namespace. %s != %s", m.Namespace, n.namespace)
	}
	return nil
}
