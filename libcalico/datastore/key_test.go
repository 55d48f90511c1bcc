package datastore_test

import (
	"errors"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

func TestKeyPathRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		key     datastore.Key
		path    string
		wantErr string
	}{
		{"cluster-scoped", datastore.Key{Kind: "IPPool", Name: "pool-a"},
			"/calico/resources/v3/projectcalico.org/ippools/pool-a", ""},
		{"namespaced", datastore.Key{Kind: "NetworkPolicy", Namespace: "default", Name: "allow-web"},
			"/calico/resources/v3/projectcalico.org/networkpolicies/default/allow-web", ""},
		{"unknown kind", datastore.Key{Kind: "Widget", Name: "w"}, "",
			`kind "Widget" is not a known resource kind`},
		{"namespace on cluster kind", datastore.Key{Kind: "IPPool", Namespace: "ns", Name: "pool-a"}, "",
			`ippool "pool-a" in namespace "ns": kind IPPool is cluster-scoped and takes no namespace`},
		{"missing namespace", datastore.Key{Kind: "NetworkPolicy", Name: "allow-web"}, "",
			`networkpolicy "allow-web": namespace must not be empty`},
		{"slash in name", datastore.Key{Kind: "IPPool", Name: "a/b"}, "",
			`ippool "a/b": name "a/b" must not contain '/'`},
		{"empty name", datastore.Key{Kind: "IPPool"}, "",
			`ippool "": name must not be empty`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, err := datastore.KeyPath(tc.key)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("KeyPath(%+v) error = %v, want %q", tc.key, err, tc.wantErr)
				}
				return
			}
			if err != nil || path != tc.path {
				t.Fatalf("KeyPath(%+v) = %q, %v; want %q", tc.key, path, err, tc.path)
			}
			back, err := datastore.ParseKeyPath(path)
			if err != nil || back != tc.key {
				t.Fatalf("ParseKeyPath(%q) = %+v, %v; want %+v", path, back, err, tc.key)
			}
		})
	}
}

func TestParseKeyPathRejects(t *testing.T) {
	cases := []struct{ path, wantErr string }{
		{"/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26",
			`key "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26" is not under /calico/resources/v3/projectcalico.org/`},
		{"/calico/resources/v3/projectcalico.org/widgets/w",
			`key "/calico/resources/v3/projectcalico.org/widgets/w": "widgets" is not the plural of a stored kind`},
		{"/calico/resources/v3/projectcalico.org/ippools/ns/pool-a",
			`key "/calico/resources/v3/projectcalico.org/ippools/ns/pool-a": kind IPPool needs 1 segment(s) after "ippools", got 2`},
		{"/calico/resources/v3/projectcalico.org/networkpolicies/allow-web",
			`key "/calico/resources/v3/projectcalico.org/networkpolicies/allow-web": kind NetworkPolicy needs 2 segment(s) after "networkpolicies", got 1`},
		{"/calico/resources/v3/projectcalico.org/ippools/",
			`key "/calico/resources/v3/projectcalico.org/ippools/" has an empty segment`},
	}
	for _, tc := range cases {
		_, err := datastore.ParseKeyPath(tc.path)
		if err == nil || err.Error() != tc.wantErr {
			t.Errorf("ParseKeyPath(%q) error = %v, want %q", tc.path, err, tc.wantErr)
		}
	}
}

func TestListPath(t *testing.T) {
	cases := []struct {
		name    string
		opts    datastore.ListOptions
		path    string
		prefix  bool
		wantErr string
	}{
		{"everything", datastore.ListOptions{}, "/calico/resources/v3/projectcalico.org/", true, ""},
		{"one cluster kind", datastore.ListOptions{Kind: "IPPool"}, "/calico/resources/v3/projectcalico.org/ippools/", true, ""},
		{"one cluster resource", datastore.ListOptions{Kind: "IPPool", Name: "p"}, "/calico/resources/v3/projectcalico.org/ippools/p", false, ""},
		{"all namespaces", datastore.ListOptions{Kind: "NetworkPolicy"}, "/calico/resources/v3/projectcalico.org/networkpolicies/", true, ""},
		{"one namespace", datastore.ListOptions{Kind: "NetworkPolicy", Namespace: "ns"}, "/calico/resources/v3/projectcalico.org/networkpolicies/ns/", true, ""},
		{"one namespaced resource", datastore.ListOptions{Kind: "NetworkPolicy", Namespace: "ns", Name: "p"}, "/calico/resources/v3/projectcalico.org/networkpolicies/ns/p", false, ""},
		{"name without namespace", datastore.ListOptions{Kind: "NetworkPolicy", Name: "p"}, "", false,
			`networkpolicy "p": listing a namespaced kind by name needs a namespace`},
		{"name without kind", datastore.ListOptions{Name: "p"}, "", false, "listing by namespace or name needs a kind"},
		{"namespace on cluster kind", datastore.ListOptions{Kind: "IPPool", Namespace: "ns"}, "", false,
			"kind IPPool is cluster-scoped and takes no namespace"},
		{"name prefix in a namespace", datastore.ListOptions{Kind: "WorkloadEndpoint", Namespace: "ns", NamePrefix: "node1-k8s-web-"},
			"/calico/resources/v3/projectcalico.org/workloadendpoints/ns/node1-k8s-web-", true, ""},
		{"cluster name prefix", datastore.ListOptions{Kind: "IPPool", NamePrefix: "pool-"}, "/calico/resources/v3/projectcalico.org/ippools/pool-", true, ""},
		{"name prefix without namespace", datastore.ListOptions{Kind: "WorkloadEndpoint", NamePrefix: "n"}, "", false,
			`workloadendpoint names starting "n": listing by name prefix needs a namespace`},
		{"name and name prefix", datastore.ListOptions{Kind: "IPPool", Name: "a", NamePrefix: "a"}, "", false,
			"ippool: give a name or a name prefix, not both"},
		{"name prefix with a slash", datastore.ListOptions{Kind: "IPPool", NamePrefix: "a/b"}, "", false,
			`name prefix "a/b" must not contain '/'`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, prefix, err := datastore.ListPath(tc.opts)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("ListPath(%+v) error = %v, want %q", tc.opts, err, tc.wantErr)
				}
				return
			}
			if err != nil || path != tc.path || prefix != tc.prefix {
				t.Fatalf("ListPath(%+v) = %q, %v, %v; want %q, %v", tc.opts, path, prefix, err, tc.path, tc.prefix)
			}
		})
	}
}

func TestErrorsMatchSentinels(t *testing.T) {
	pool := datastore.Key{Kind: "IPPool", Name: "pool-a"}
	pol := datastore.Key{Kind: "NetworkPolicy", Namespace: "default", Name: "allow-web"}
	cases := []struct {
		err      error
		sentinel error
		msg      string
	}{
		{&datastore.NotFoundError{Key: pool}, datastore.ErrNotFound, `ippool "pool-a": resource does not exist`},
		{&datastore.NotFoundError{Key: pol}, datastore.ErrNotFound, `networkpolicy "allow-web" in namespace "default": resource does not exist`},
		{&datastore.NotFoundError{Path: "/calico/ipam/v2/handle/h"}, datastore.ErrNotFound, `key "/calico/ipam/v2/handle/h": resource does not exist`},
		{&datastore.AlreadyExistsError{Key: pool}, datastore.ErrAlreadyExists, `ippool "pool-a": resource already exists`},
		{&datastore.ConflictError{Key: pool, Op: "update", Revision: "5", Current: "7"}, datastore.ErrConflict,
			`ippool "pool-a": update conflict: resourceVersion 5 is stale (current 7)`},
		{&datastore.ConflictError{Path: "/calico/ipam/v2/handle/h", Op: "delete", Revision: "5", Current: "7"}, datastore.ErrConflict,
			`key "/calico/ipam/v2/handle/h": delete conflict: revision 5 is stale (current 7)`},
		{&datastore.CompactedError{Revision: "3"}, datastore.ErrCompacted, ""},
	}
	sentinels := []error{datastore.ErrNotFound, datastore.ErrAlreadyExists, datastore.ErrConflict, datastore.ErrCompacted}
	for _, tc := range cases {
		wrapped := errors.Join(errors.New("context"), tc.err)
		for _, s := range sentinels {
			if got, want := errors.Is(wrapped, s), s == tc.sentinel; got != want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", tc.err, s, got, want)
			}
		}
		if tc.msg != "" && tc.err.Error() != tc.msg {
			t.Errorf("message = %q, want %q", tc.err.Error(), tc.msg)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	c := datastore.NewCodec()
	in := &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "pool-a", ResourceVersion: "9"}, Spec: v3.IPPoolSpec{CIDR: "10.0.0.0/16"}}
	val, obj, err := c.Encode(in, "uid-1", v3.Time{})
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if in.Kind != "" || in.ResourceVersion != "9" || in.UID != "" {
		t.Errorf("Encode modified its input: %+v", in)
	}
	want := `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"pool-a","uid":"uid-1"},"spec":{"cidr":"10.0.0.0/16"}}`
	if string(val) != want {
		t.Errorf("stored value\n got %s\nwant %s", val, want)
	}
	if obj.GetObjectMeta().UID != "uid-1" || obj.GetTypeMeta().Kind != "IPPool" {
		t.Errorf("returned copy not stamped: %+v", obj)
	}
	back, err := c.Decode("/calico/resources/v3/projectcalico.org/ippools/pool-a", val, 42)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	p, ok := back.(*v3.IPPool)
	if !ok || p.Spec.CIDR != "10.0.0.0/16" || p.ResourceVersion != "42" || p.APIVersion != v3.APIVersion {
		t.Errorf("Decode = %#v", back)
	}
	if _, err := c.Decode("/calico/resources/v3/projectcalico.org/ippools/pool-a", []byte("{"), 1); err == nil {
		t.Errorf("Decode of broken JSON succeeded")
	}
}
