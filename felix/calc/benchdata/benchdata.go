// Package benchdata makes the large cluster the explain benchmarks read,
// after Calico's snapshot benchmark (felix/calc's
// BenchmarkSnapshot200Local250kTotal10000TagPols): global policies that
// each select one of thirty tag-like labels and allow from five of them,
// a hundred namespaces with their kns. profiles, and endpoints with five
// "one-in-N" labels and one tag. It writes them straight into etcd.
package benchdata

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Markers are the tag labels policies select on (one duplicated, as in
// Calico's benchmark).
var Markers = []string{
	"FOO_BAR", "FOO_BAR", "BIFF_BOP", "calico/FizzBuzz", "calico/BoffBip", "calico/Bazzle", "calico/Razzle",
	"calico/DoopDeeDoo", "calico/SOME_LABEL", "calico/BORED_NOW", "MyMarkerLabel",
	"xFOO_BAR", "xBIFF_BOP", "xcalico/FizzBuzz", "xcalico/BoffBip", "xcalico/Bazzle", "xcalico/Razzle",
	"xcalico/DoopDeeDoo", "xcalico/SOME_LABEL", "xcalico/BORED_NOW",
	"yxMyMarkerLabel", "yxFOO_BAR", "yxBIFF_BOP", "yxcalico/FizzBuzz", "yxcalico/BoffBip", "yxcalico/Bazzle",
	"yxcalico/Razzle", "yxcalico/DoopDeeDoo", "yxcalico/SOME_LABEL", "yxcalico/BORED_NOW", "yxMyMarkerLabel",
}

// Pool holds every endpoint's address.
const Pool = "10.0.0.0/8"

// Cluster returns the pool, policies, namespace profiles and endpoints:
// endpoint i is pod wep-<i> in namespace namespace-<i%100> at 10.0.0.1+i,
// on node(i).
func Cluster(endpoints, policies int, node func(i int) string) []v3.Resource {
	var out []v3.Resource
	out = append(out, &v3.IPPool{TypeMeta: v3.TypeMeta{Kind: v3.KindIPPool, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: "bench"}, Spec: v3.IPPoolSpec{CIDR: Pool, BlockSize: 26}})
	for i := range policies {
		p := &v3.GlobalNetworkPolicy{TypeMeta: v3.TypeMeta{Kind: v3.KindGlobalNetworkPolicy, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("tag-pol-%d", i)},
			Spec: v3.GlobalNetworkPolicySpec{Tier: "default", Selector: fmt.Sprintf("has(%s)", Markers[i%len(Markers)]),
				Types: []v3.PolicyType{v3.PolicyTypeIngress}}}
		for j := range 5 {
			p.Spec.Ingress = append(p.Spec.Ingress, v3.Rule{Action: v3.Allow,
				Source: v3.EntityRule{Selector: fmt.Sprintf("has(%s)", Markers[(i+j)%len(Markers)])}})
		}
		out = append(out, p)
	}
	for i := range 100 {
		name := Namespace(i)
		out = append(out, &v3.Profile{TypeMeta: v3.TypeMeta{Kind: v3.KindProfile, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: "kns." + name},
			Spec: v3.ProfileSpec{LabelsToApply: map[string]string{"pcns.projectcalico.org/name": name},
				Ingress: []v3.Rule{{Action: v3.Allow}}, Egress: []v3.Rule{{Action: v3.Allow}}}})
	}
	for i := range endpoints {
		labels := map[string]string{}
		for _, m := range []int{10, 11, 20, 30, 40} {
			labels["one-in-"+strconv.Itoa(m)] = "value-" + strconv.Itoa(i%m)
		}
		labels[Markers[i%len(Markers)]] = "true"
		ns := Namespace(i)
		n := node(i)
		out = append(out, &v3.WorkloadEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("%s-k8s-wep--%d-eth0", n, i), Namespace: ns, Labels: labels},
			Spec: v3.WorkloadEndpointSpec{Orchestrator: "k8s", Node: n, Pod: Pod(i), Endpoint: "eth0",
				IPNetworks: []string{Addr(i).String() + "/32"}, InterfaceName: fmt.Sprintf("cali%011d", i), Profiles: []string{"kns." + ns}}})
	}
	return out
}

// Namespace is endpoint i's namespace; Pod its pod; Addr its address.
func Namespace(i int) string { return fmt.Sprintf("namespace-%d", i%100) }
func Pod(i int) string       { return fmt.Sprintf("wep-%d", i) }
func Addr(i int) netip.Addr {
	ip := uint32(0x0a000001) + uint32(i)
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)})
}

// Write stores resources as new values in etcd, 128 to a transaction.
func Write(ctx context.Context, raw *clientv3.Client, rs []v3.Resource) error {
	codec := datastore.NewCodec()
	created := v3.NewTime(time.Now())
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := raw.Txn(ctx).Then(ops...).Commit()
		ops = ops[:0]
		return err
	}
	for _, r := range rs {
		val, _, err := codec.Encode(r, uuid.NewString(), created)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", datastore.KeyOf(r), err)
		}
		path, err := datastore.KeyPath(datastore.KeyOf(r))
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(path, string(val)))
		if len(ops) == 128 {
			if err := flush(); err != nil {
				return fmt.Errorf("writing the benchmark cluster: %w", err)
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("writing the benchmark cluster: %w", err)
	}
	return nil
}
