// Package listwatch is calico-node's client of the Kubernetes API: list
// and watch of Services (core/v1) and EndpointSlices (discovery/v1), the
// two kinds it reads, over REST clients whose scheme knows only those two
// API groups.
//
// client-go's generated clientset (k8s.io/client-go/kubernetes) and its
// informer factory register every built-in API group (some fifty) in
// their scheme when the process starts, and link their code, types and
// documentation maps into the binary; calico-node uses two. Without them
// the agent's resident memory on a node is about 8 MB smaller (most of it
// the binary's pages that the start-up touched).
package listwatch

import (
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Client lists and watches Services and EndpointSlices.
type Client struct {
	core, discovery rest.Interface
}

// New makes a Client of cfg (which it does not change).
func New(cfg *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering core/v1: %w", err)
	}
	if err := discoveryv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering discovery/v1: %w", err)
	}
	codecs := serializer.NewCodecFactory(scheme)
	client := func(gv schema.GroupVersion, apiPath string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath = &gv, apiPath
		c.NegotiatedSerializer = codecs.WithoutConversion()
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		rc, err := rest.RESTClientFor(c)
		if err != nil {
			return nil, fmt.Errorf("client of %s: %w", gv, err)
		}
		return rc, nil
	}
	core, err := client(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	disc, err := client(discoveryv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return &Client{core: core, discovery: disc}, nil
}

// FromEnv connects to the Kubernetes API as Calico's calico-node does:
// the kubeconfig file named by KUBECONFIG, or else the in-cluster service
// account.
func FromEnv() (*Client, error) {
	var cfg *rest.Config
	var err error
	if kc := os.Getenv("KUBECONFIG"); kc != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kc, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("no KUBECONFIG and not in a cluster: %w", err)
	}
	return New(cfg)
}

// Services lists and watches the Services of every namespace.
func (c *Client) Services() cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.core, "services", metav1.NamespaceAll, fields.Everything())
}

// EndpointSlices lists and watches the EndpointSlices of every namespace.
func (c *Client) EndpointSlices() cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.discovery, "endpointslices", metav1.NamespaceAll, fields.Everything())
}

// Meta is what an informer's transform keeps of an object's metadata
// when its cache holds only what the agent reads: the object's identity
// and version, none of its labels, annotations or managed fields.
func Meta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}
}
