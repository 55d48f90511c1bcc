package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates (or replaces) every CustomResourceDefinition of the
// multi-document YAML docs and waits until the API server reports each
// Established, as `kubectl apply` then `kubectl wait` would.
func InstallCRDs(ctx context.Context, rc *rest.Config, docs string) error {
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	crds := dc.Resource(crdResource)
	var names []string
	for _, doc := range strings.Split(docs, "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return fmt.Errorf("parsing a CRD: %w", err)
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.GetKind() != "CustomResourceDefinition" {
			return fmt.Errorf("%s %q is not a CustomResourceDefinition", u.GetKind(), u.GetName())
		}
		delete(u.Object, "status")
		_, err := crds.Create(ctx, u, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *unstructured.Unstructured
			if cur, err = crds.Get(ctx, u.GetName(), metav1.GetOptions{}); err == nil {
				u.SetResourceVersion(cur.GetResourceVersion())
				_, err = crds.Update(ctx, u, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("creating CRD %q: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	for _, name := range names {
		if err := waitEstablished(ctx, crds, name); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, crds dynamic.NamespaceableResourceInterface, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		u, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading CRD %q: %w", name, err)
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %q: %w", name, errors.New("not Established after 30s"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
