package k8s

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodAddressing(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: map[string]string{
		AnnotationIPv4Pools: `["ns-pool"]`, AnnotationIPv6Pools: `["fd00:1::/64"]`}}}
	tests := []struct {
		name  string
		annot map[string]string
		ns    *corev1.Namespace
		want  string
		err   string
	}{
		{"nothing", nil, nil, "req=[] noipam=false v4=[] v6=[]", ""},
		{"ipAddrs", map[string]string{AnnotationIPAddrs: `["10.0.0.7", "fd00::7"]`}, nil, "req=[10.0.0.7 fd00::7] noipam=false v4=[] v6=[]", ""},
		{"ipAddrsNoIpam", map[string]string{AnnotationIPAddrsNoIPAM: `["10.0.0.8"]`}, nil, "req=[10.0.0.8] noipam=true v4=[] v6=[]", ""},
		{"both", map[string]string{AnnotationIPAddrs: `["10.0.0.7"]`, AnnotationIPAddrsNoIPAM: `["10.0.0.8"]`}, nil, "", "can't have both annotations"},
		{"two IPv4", map[string]string{AnnotationIPAddrs: `["10.0.0.7","10.0.0.8"]`}, nil, "", "at most one IPv4 and one IPv6"},
		{"not JSON", map[string]string{AnnotationIPAddrs: `10.0.0.7`}, nil, "", "want a JSON list of addresses"},
		{"not an address", map[string]string{AnnotationIPAddrs: `["10.0.0.300"]`}, nil, "", `"10.0.0.300" is not an IP address`},
		{"empty list", map[string]string{AnnotationIPAddrs: `[]`}, nil, "", "names no address"},
		{"namespace pools", nil, ns, "req=[] noipam=false v4=[ns-pool] v6=[fd00:1::/64]", ""},
		{"pod pools win", map[string]string{AnnotationIPv4Pools: `["pod-pool","10.9.0.0/16"]`}, ns, "req=[] noipam=false v4=[pod-pool 10.9.0.0/16] v6=[fd00:1::/64]", ""},
		{"bad pools", map[string]string{AnnotationIPv4Pools: `pool-a`}, nil, "", "want a JSON list of pool names"},
		{"floating IPs", map[string]string{AnnotationFloatingIPs: `["1.2.3.4", " fd00:f::4", "::ffff:1.2.3.5"]`}, nil, "req=[] noipam=false v4=[] v6=[] fip=[1.2.3.4 fd00:f::4 1.2.3.5]", ""},
		{"floating not JSON", map[string]string{AnnotationFloatingIPs: `1.2.3.4`}, nil, "", "floatingIPs \"1.2.3.4\": want a JSON list of addresses"},
		{"floating not an address", map[string]string{AnnotationFloatingIPs: `["1.2.3.0/24"]`}, nil, "", `floatingIPs: "1.2.3.0/24" is not an IP address`},
		{"floating empty", map[string]string{AnnotationFloatingIPs: `[]`}, nil, "", "names no address"},
		{"floating twice", map[string]string{AnnotationFloatingIPs: `["1.2.3.4","1.2.3.4"]`}, nil, "", "1.2.3.4 is named twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "x", Annotations: tc.annot}}
			a, err := PodAddressing(pod, tc.ns)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want it to say %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("req=%v noipam=%v v4=%v v6=%v", a.Requested, a.NoIPAM, a.IPv4Pools, a.IPv6Pools)
			if a.Floating != nil {
				got += fmt.Sprintf(" fip=%v", a.Floating)
			}
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestIPNATs(t *testing.T) {
	ap := netip.MustParseAddr
	pod := []netip.Addr{ap("10.0.0.7"), ap("fd00::7"), ap("10.0.0.8")}
	got, err := IPNATs([]netip.Addr{ap("fd00:f::1"), ap("1.2.3.4")}, pod)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[[fd00::7 fd00:f::1] [10.0.0.7 1.2.3.4]]"; fmt.Sprint(got) != want {
		t.Errorf("got %v, want %s", got, want)
	}
	if _, err := IPNATs([]netip.Addr{ap("fd00:f::1")}, pod[:1]); err == nil || !strings.Contains(err.Error(), "floating IP fd00:f::1 needs an IPv6 address on the pod") {
		t.Errorf("error %v, want it to name the missing IPv6 address", err)
	}
}

func TestPodIPAnnotations(t *testing.T) {
	got := PodIPAnnotations("abc", []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")})
	want := map[string]string{AnnotationPodIP: "10.0.0.1/32", AnnotationPodIPs: "10.0.0.1/32,fd00::1/128", AnnotationContainerID: "abc"}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
