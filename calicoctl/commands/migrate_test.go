package commands_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

// calicoKV is one key of a Calico cluster's etcd.
type calicoKV struct {
	key   string
	value []byte
}

// loadCalicoDatastore reads testdata/calico-etcd/datastore.txt (key and
// value on alternate lines) and puts every key into the cluster's etcd,
// as a running Calico cluster left it.
func loadCalicoDatastore(t *testing.T, c *cluster) []calicoKV {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "calico-etcd", "datastore.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if len(lines)%2 != 0 {
		t.Fatalf("datastore.txt: %d lines, want key and value pairs", len(lines))
	}
	var kvs []calicoKV
	for i := 0; i < len(lines); i += 2 {
		kv := calicoKV{key: lines[i], value: []byte(lines[i+1])}
		if !json.Valid(kv.value) {
			t.Fatalf("datastore.txt: value of %s is not JSON", kv.key)
		}
		if _, err := c.raw.Put(context.Background(), kv.key, string(kv.value)); err != nil {
			t.Fatalf("loading %s: %v", kv.key, err)
		}
		kvs = append(kvs, kv)
	}
	return kvs
}

// TestMigrateReadsCalicoDatastore loads an etcd written by Calico (every
// stored kind, IPAM blocks with allocations, attributes and handles, host
// affinities and Calico's IPAM configuration record) and checks what
// Palisade makes of it: calicoctl lists every resource and the IPAM state
// as Calico holds it, allocation continues in the nodes' own blocks
// without handing out a held address and under Calico's strict affinity,
// and every value Palisade writes back is the JSON Calico wrote.
func TestMigrateReadsCalicoDatastore(t *testing.T) {
	c := newCluster(t)
	kvs := loadCalicoDatastore(t, c)

	// calicoctl reads every kind, with no value it cannot decode.
	var got strings.Builder
	kinds := map[string]bool{}
	for _, kv := range kvs {
		if strings.HasPrefix(kv.key, datastore.ResourcePrefix) {
			plural := strings.SplitN(strings.TrimPrefix(kv.key, datastore.ResourcePrefix), "/", 2)[0]
			kinds[plural] = true
		}
	}
	for _, info := range v3.Kinds() {
		if !info.Stored {
			continue
		}
		if !kinds[info.Plural] && info.Kind != v3.KindIPAMConfiguration {
			t.Errorf("the Calico datastore fixture has no %s", info.Kind)
		}
		args := []string{"get", info.Plural, "-o", "yaml"}
		if info.Namespaced {
			args = append(args, "-A")
		}
		r := c.run(t, "", nil, args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("calicoctl %s: exit %d, stderr %s", strings.Join(args, " "), r.code, r.stderr)
		}
		got.WriteString("# calicoctl " + strings.Join(args, " ") + "\n" + r.stdout)
	}
	golden(t, "migrate-get.txt", got.String())
	golden(t, "migrate-ipam-show.txt", c.mustRun(t, "", "ipam", "show", "--show-blocks"))
	check := c.mustRun(t, "", "ipam", "check")
	golden(t, "migrate-ipam-check.txt", check)
	if !strings.Contains(check, "found 0 problems") {
		t.Errorf("ipam check finds problems in Calico's IPAM state:\n%s", check)
	}

	// Allocation goes on where Calico left it.
	s, err := etcdv3.New(context.Background(), etcdv3.Config{Endpoints: c.endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	alloc := ipam.New(s, s.KV())
	ctx := context.Background()
	cfg, err := alloc.GetConfig(ctx)
	if err != nil || !cfg.StrictAffinity || !cfg.AutoAllocateBlocks {
		t.Errorf("IPAM configuration from Calico's /calico/ipam/v2/config: %+v, %v; want strict affinity and automatic blocks", cfg, err)
	}
	held := map[netip.Addr]bool{}
	for _, a := range []string{"192.168.0.0", "192.168.0.1", "192.168.0.2", "192.168.0.64", "192.168.0.69"} {
		held[netip.MustParseAddr(a)] = true
	}
	for _, tc := range []struct{ node, handle, want string }{
		// The first free ordinal of each node's block, in Calico's
		// unallocated order.
		{"node1", "k8s-pod-network.new1", "192.168.0.3"},
		{"node2", "k8s-pod-network.new2", "192.168.0.65"},
	} {
		v4, _, err := alloc.AutoAssign(ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: tc.handle, Hostname: tc.node,
			Attrs: map[string]string{"node": tc.node, "namespace": "default", "pod": "new"}})
		if err != nil {
			t.Fatalf("AutoAssign on %s: %v", tc.node, err)
		}
		if v4 == nil || len(v4.IPs) != 1 || v4.IPs[0].Addr().String() != tc.want || held[v4.IPs[0].Addr()] {
			t.Errorf("AutoAssign on %s gave %v, want %s (held: %v)", tc.node, v4, tc.want, held)
		}
	}

	// What Palisade wrote is what Calico's readers take: the block in
	// Calico's fields only, its allocations and claim time untouched, and
	// the new handle as Calico writes one.
	blockKey := "/calico/ipam/v2/assignment/ipv4/block/192.168.0.0-26"
	var before, after calicoBlock
	decodeCalico(t, blockKey, valueOf(t, kvs, blockKey), &before)
	decodeCalico(t, blockKey, rawGet(t, c, blockKey), &after)
	if after.AffinityClaimTime != before.AffinityClaimTime || *after.Affinity != "host:node1" {
		t.Errorf("block affinity %v claimed %q, want host:node1 claimed %q", *after.Affinity, after.AffinityClaimTime, before.AffinityClaimTime)
	}
	for ord := 0; ord < 3; ord++ {
		if after.Allocations[ord] == nil || !reflect.DeepEqual(after.Attributes[*after.Allocations[ord]], before.Attributes[*before.Allocations[ord]]) {
			t.Errorf("ordinal %d's allocation changed: %v", ord, after.Allocations[ord])
		}
	}
	if after.Allocations[3] == nil || after.SequenceNumber != before.SequenceNumber+1 {
		t.Errorf("new allocation at ordinal 3 %v, sequence %d (was %d)", after.Allocations[3], after.SequenceNumber, before.SequenceNumber)
	}
	var h calicoHandle
	decodeCalico(t, "handle", rawGet(t, c, "/calico/ipam/v2/handle/k8s-pod-network.new1"), &h)
	if !reflect.DeepEqual(h, calicoHandle{Block: map[string]int{"192.168.0.0/26": 1}}) {
		t.Errorf("new handle %+v", h)
	}

	// Every resource read and applied again is stored as Calico stored it.
	for _, kv := range kvs {
		if !strings.HasPrefix(kv.key, datastore.ResourcePrefix) || strings.Contains(kv.key, "/clusterinformations/") {
			continue
		}
		rs, err := v3.Decode(kv.value)
		if err != nil {
			t.Fatalf("%s: %v", kv.key, err)
		}
		m := rs[0].GetObjectMeta()
		if strings.HasPrefix(m.Name, "knp.default.") {
			continue // written by calico-kube-controllers only, as in Calico
		}
		args := []string{"get", rs[0].GetTypeMeta().Kind, m.Name, "-o", "yaml"}
		if m.Namespace != "" {
			args = append(args, "-n", m.Namespace)
		}
		c.mustRun(t, c.mustRun(t, "", args...), "apply", "-f", "-")
		var want, stored any
		_ = json.Unmarshal(kv.value, &want)
		_ = json.Unmarshal(rawGet(t, c, kv.key), &stored)
		if !reflect.DeepEqual(want, stored) {
			t.Errorf("%s written back differs from Calico's value:\n got: %s\nwant: %s", kv.key, rawGet(t, c, kv.key), kv.value)
		}
	}
}

// calicoBlock and calicoHandle are Calico's stored IPAM shapes
// (libcalico-go's model.AllocationBlock and model.IPAMHandle): decoding
// with unknown fields refused proves a value holds nothing else.
type calicoBlock struct {
	CIDR                        string            `json:"cidr"`
	Affinity                    *string           `json:"affinity"`
	AffinityClaimTime           string            `json:"affinity_claim_time,omitempty"`
	Allocations                 []*int            `json:"allocations"`
	Unallocated                 []int             `json:"unallocated"`
	Attributes                  []calicoAttribute `json:"attributes"`
	SequenceNumber              uint64            `json:"sequenceNumber"`
	SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation"`
	Deleted                     bool              `json:"deleted"`
	HostAffinity                *string           `json:"hostAffinity,omitempty"`
}

type calicoAttribute struct {
	HandleID  *string           `json:"handle_id,omitempty"`
	Secondary map[string]string `json:"secondary,omitempty"`
	Alternate map[string]string `json:"alternate,omitempty"`
}

type calicoHandle struct {
	Block   map[string]int `json:"block"`
	Deleted bool           `json:"deleted"`
}

func decodeCalico(t *testing.T, what string, value []byte, into any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s is not in Calico's shape: %v\n%s", what, err, value)
	}
}

func valueOf(t *testing.T, kvs []calicoKV, key string) []byte {
	t.Helper()
	for _, kv := range kvs {
		if kv.key == key {
			return kv.value
		}
	}
	t.Fatalf("fixture has no %s", key)
	return nil
}

func rawGet(t *testing.T, c *cluster, key string) []byte {
	t.Helper()
	resp, err := c.raw.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading %s: %v (%d keys)", key, err, len(resp.Kvs))
	}
	return resp.Kvs[0].Value
}
