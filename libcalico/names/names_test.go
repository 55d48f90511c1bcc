package names

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

func TestVethNameForWorkload(t *testing.T) {
	cases := []struct {
		namespace, pod string
	}{
		{"default", "nginx"},
		{"kube-system", "coredns-5d78c9869d-abcde"},
		{"", ""},
	}
	for _, c := range cases {
		got := VethNameForWorkload(c.namespace, c.pod)
		sum := sha1.Sum([]byte(c.namespace + "." + c.pod))
		want := "cali" + hex.EncodeToString(sum[:])[:11]
		if got != want {
			t.Errorf("VethNameForWorkload(%q, %q) = %q, want %q", c.namespace, c.pod, got, want)
		}
		if len(got) != 15 {
			t.Errorf("VethNameForWorkload(%q, %q) = %q: %d bytes, the kernel allows exactly 15", c.namespace, c.pod, got, len(got))
		}
	}
	// A known value, computed independently with `printf default.nginx | sha1sum`.
	if got, want := VethNameForWorkload("default", "nginx"), "calic440f455693"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if VethNameForWorkload("a", "b.c") != VethNameForWorkload("a.b", "c") {
		t.Errorf("names hash <namespace>.<pod> as one string, as Calico does")
	}
}

func TestVethNameForContainer(t *testing.T) {
	cases := []struct{ id, want string }{
		{"0123456789abcdef", "cali0123456789a"},
		{"abc", "caliabc"},
	}
	for _, c := range cases {
		if got := VethNameForContainer(c.id); got != c.want {
			t.Errorf("VethNameForContainer(%q) = %q, want %q", c.id, got, c.want)
		}
	}
}

func TestWorkloadEndpointName(t *testing.T) {
	cases := []struct {
		node, orch, workload, iface, want string
	}{
		{"node1", "k8s", "nginx", "eth0", "node1-k8s-nginx-eth0"},
		{"node-1", "k8s", "web-7d4b9-x2", "eth0", "node--1-k8s-web--7d4b9--x2-eth0"},
		{"n.example.com", "cni", "0a1b2c", "net-1", "n.example.com-cni-0a1b2c-net--1"},
	}
	for _, c := range cases {
		if got := WorkloadEndpointName(c.node, c.orch, c.workload, c.iface); got != c.want {
			t.Errorf("WorkloadEndpointName(%q, %q, %q, %q) = %q, want %q", c.node, c.orch, c.workload, c.iface, got, c.want)
		}
	}
}
