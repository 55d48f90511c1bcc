package kubetest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStart brings up a real API server and controller manager: a
// namespace gets its default service account from the controller manager.
func TestStart(t *testing.T) {
	began := time.Now()
	c := Start(t)
	t.Logf("kube-apiserver ready in %s", time.Since(began).Round(time.Millisecond))
	if err := c.StartControllerManager(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Client.CoreV1().ServiceAccounts("x").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no default service account in x after 30s:\n%s", c.Log("kube-controller-manager"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("default service account after %s", time.Since(began).Round(time.Millisecond))
}
