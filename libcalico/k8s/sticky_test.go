package k8s

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodReleasePolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		annot map[string]string
		want  ReleasePolicy
		err   string
	}{
		{"none", nil, ReleaseOnStop, ""},
		{"empty", map[string]string{AnnotationIPReleasePolicy: ""}, ReleaseOnStop, ""},
		{"immutable", map[string]string{AnnotationIPReleasePolicy: "immutable"}, ReleaseImmutable, ""},
		{"galaxy alias", map[string]string{AnnotationGalaxyIPReleasePolicy: "never"}, ReleaseNever, ""},
		{"both agree", map[string]string{AnnotationIPReleasePolicy: "never", AnnotationGalaxyIPReleasePolicy: "never"}, ReleaseNever, ""},
		{"both disagree", map[string]string{AnnotationIPReleasePolicy: "never", AnnotationGalaxyIPReleasePolicy: "immutable"}, "", "disagree"},
		{"bad value", map[string]string{AnnotationGalaxyIPReleasePolicy: "forever"}, "", `k8s.v1.cni.galaxy.io/release-policy "forever": want one of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodReleasePolicy(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annot}})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestPodStickyOwner(t *testing.T) {
	yes := true
	pod := func(name string, refs ...metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, OwnerReferences: refs}}
	}
	sts := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "u1", Controller: &yes}
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d9", UID: "u2", Controller: &yes}
	if o, err := PodStickyOwner(pod("db-2", sts)); err != nil || o != (StickyOwner{Kind: "StatefulSet", Name: "db", UID: "u1", Ordinal: 2}) {
		t.Errorf("StatefulSet pod: %+v, %v", o, err)
	}
	for name, p := range map[string]*corev1.Pod{"no owner": pod("db-0"), "ReplicaSet": pod("web-5d9-x", rs), "bad ordinal": pod("db-x", sts),
		"leading zero": pod("db-01", sts)} {
		if _, err := PodStickyOwner(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
