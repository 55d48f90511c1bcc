// Package k8sapi is the calico plugin's connection to the Kubernetes API
// server: the configuration (kubeconfig, API root and the policy
// section's credentials, as Calico reads them) and the few requests the
// plugin makes (read a pod, its namespace, its node; annotate the pod).
// It is client-go's REST client over core/v1 only, not a full clientset,
// so the plugin stays quick to start.
package k8sapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/palisade-net/palisade/cni-plugin/netconf"
)

// Configured says whether the network configuration names an API server
// (kubernetes.kubeconfig, kubernetes.k8s_api_root or policy.k8s_api_root):
// only then does the plugin talk to Kubernetes.
func Configured(c *netconf.NetConf) bool {
	return c.Kubernetes.Kubeconfig != "" || c.Kubernetes.K8sAPIRoot != "" || c.Policy.K8sAPIRoot != ""
}

// Client talks to the API server.
type Client struct {
	rc  *rest.RESTClient
	cfg *rest.Config
}

// New builds the client from the configuration: the kubeconfig, with the
// API root and the policy section's credentials overriding it, as
// Calico's plugin does. A configuration that cannot be used is a CNI
// "invalid network configuration" error naming what is wrong; New makes
// no request.
func New(c *netconf.NetConf) (*Client, error) {
	bad := func(format string, a ...any) error {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("network %q: ", c.Name)+fmt.Sprintf(format, a...), "")
	}
	over := &clientcmd.ConfigOverrides{}
	over.ClusterInfo.Server = c.Policy.K8sAPIRoot
	if c.Kubernetes.K8sAPIRoot != "" {
		over.ClusterInfo.Server = c.Kubernetes.K8sAPIRoot
	}
	over.AuthInfo.Token = c.Policy.K8sAuthToken
	over.AuthInfo.ClientCertificate = c.Policy.K8sClientCertificate
	over.AuthInfo.ClientKey = c.Policy.K8sClientKey
	over.ClusterInfo.CertificateAuthority = c.Policy.K8sCertificateAuthority
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubernetes.Kubeconfig}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, over).ClientConfig()
	if err != nil {
		if c.Kubernetes.Kubeconfig != "" {
			return nil, bad("kubernetes.kubeconfig %s: %v", c.Kubernetes.Kubeconfig, err)
		}
		return nil, bad("reaching the Kubernetes API server: %v", err)
	}
	cfg.Timeout = c.Timeout()
	cfg.UserAgent = "calico-cni (palisade)"
	cfg.QPS, cfg.Burst = -1, 0 // a handful of requests: no client-side rate limit
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	cfg.APIPath = "/api"
	cfg.GroupVersion = &schema.GroupVersion{Version: "v1"}
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	cfg.ContentType = "application/json"
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, bad("Kubernetes API client: %v", err)
	}
	return &Client{rc: rc, cfg: cfg}, nil
}

// Host is the API server the client talks to.
func (c *Client) Host() string { return c.cfg.Host }

// get reads one object into out.
func (c *Client) get(ctx context.Context, out any, namespace, resource, name string) error {
	req := c.rc.Get().Resource(resource).Name(name)
	if namespace != "" {
		req = req.Namespace(namespace)
	}
	body, err := req.Do(ctx).Raw()
	if err != nil {
		return err
	}
	return json.Unmarshal(body, out)
}

// Pod reads a pod. A pod that does not exist is a CNI "unknown container"
// error; an API server that cannot be reached, "try again later".
func (c *Client) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	if err := c.get(ctx, &p, namespace, "pods", name); err != nil {
		return nil, c.cniError(fmt.Sprintf("pod %s/%s", namespace, name), err)
	}
	return &p, nil
}

// Namespace reads a namespace.
func (c *Client) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	var ns corev1.Namespace
	if err := c.get(ctx, &ns, "", "namespaces", name); err != nil {
		return nil, c.cniError(fmt.Sprintf("namespace %s", name), err)
	}
	return &ns, nil
}

// Node reads a node.
func (c *Client) Node(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	if err := c.get(ctx, &n, "", "nodes", name); err != nil {
		return nil, c.cniError(fmt.Sprintf("node %s", name), err)
	}
	return &n, nil
}

// AnnotatePod sets annotations on a pod (a merge patch: others are kept).
func (c *Client) AnnotatePod(ctx context.Context, namespace, name string, annotations map[string]string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	err := c.rc.Patch(ktypes.MergePatchType).Namespace(namespace).Resource("pods").Name(name).Body(patch).Do(ctx).Error()
	if err != nil {
		return c.cniError(fmt.Sprintf("annotating pod %s/%s", namespace, name), err)
	}
	return nil
}

// RemovePodAnnotations removes keys from a pod's annotations, but only
// while its annotation guardKey still says guardValue (a JSON patch whose
// test fails otherwise): a late DEL of a replaced sandbox leaves its
// successor's annotations alone. A pod that is gone, or that no longer
// carries them, is not an error.
func (c *Client) RemovePodAnnotations(ctx context.Context, namespace, name, guardKey, guardValue string, keys ...string) error {
	esc := func(k string) string {
		return "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
	}
	ops := []map[string]any{{"op": "test", "path": esc(guardKey), "value": guardValue}}
	for _, k := range keys {
		ops = append(ops, map[string]any{"op": "remove", "path": esc(k)})
	}
	patch, _ := json.Marshal(ops)
	err := c.rc.Patch(ktypes.JSONPatchType).Namespace(namespace).Resource("pods").Name(name).Body(patch).Do(ctx).Error()
	var st apierrors.APIStatus
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsInvalid(err):
		return nil
	case errors.As(err, &st) && st.Status().Code == http.StatusUnprocessableEntity:
		return nil // the test failed: not this sandbox's annotations
	}
	return c.cniError(fmt.Sprintf("removing the address annotations of pod %s/%s", namespace, name), err)
}

// cniError turns a request error into a CNI error naming what failed.
func (c *Client) cniError(what string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return types.NewError(types.ErrUnknownContainer, what+" does not exist in the Kubernetes API ("+c.cfg.Host+")", "")
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("%s: the Kubernetes API server (%s) refused the plugin's credentials: %v", what, c.cfg.Host, err), "")
	case errors.Is(err, context.DeadlineExceeded):
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("%s: the Kubernetes API server (%s) did not answer in %s", what, c.cfg.Host, c.cfg.Timeout.Round(time.Millisecond)), "")
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("%s: the Kubernetes API server (%s): %v", what, c.cfg.Host, err), "")
	}
	return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("%s: reaching the Kubernetes API server (%s): %v", what, c.cfg.Host, err), "")
}
