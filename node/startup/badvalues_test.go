package startup

import (
	"context"
	"path/filepath"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// TestRunOverBadValues: startup completes when the node's own Node, the
// ClusterInformation and IP pools hold values that are not valid
// resources: the first two are written afresh, the bad pools are skipped
// (the good one counts, so no default pool is made).
func TestRunOverBadValues(t *testing.T) {
	n := newNS(t)
	n.veth(t, "eth0", "p-eth0", "198.18.0.2/24")
	ctx := context.Background()
	store := etcdtest.NewStore(t, etcdtest.Start(t))
	c := client.New(store)
	if _, err := c.Create(ctx, &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "mine"}, Spec: v3.IPPoolSpec{CIDR: "10.44.0.0/16"}}); err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{
		"nodes/node-a":                   `{"kind":"Node","spec":{`,
		"clusterinformations/default":    `{"kind":"ClusterInformation","apiVersion":"projectcalico.org/v3","metadata":{"name":"other"}}`,
		"ippools/broken":                 `{not json`,
		"ippools/" + DefaultIPv4PoolName: `{"kind":"GlobalNetworkPolicy"}`,
	} {
		if _, err := store.Client().Put(ctx, datastore.ResourcePrefix+key, value); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := FromEnv(env(map[string]string{"NODENAME": "node-a", "CALICO_SKIP_SYSCTLS": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg.NodenameFile = filepath.Join(t.TempDir(), "nodename")
	res, err := Run(ctx, cfg, c, NetlinkHost{Handle: n.handle}, nil)
	if err != nil {
		t.Fatalf("startup over bad values: %v", err)
	}
	if res.Node == nil || res.Node.Spec.BGP == nil || res.Node.Spec.BGP.IPv4Address != "198.18.0.2/24" {
		t.Fatalf("node written as %+v", res.Node)
	}
	if len(res.CreatedPools) != 0 {
		t.Errorf("created pools %v beside a good one", res.CreatedPools)
	}
	r, err := c.Get(ctx, datastore.Key{Kind: v3.KindClusterInformation, Name: "default"})
	if err != nil || r.(*v3.ClusterInformation).Spec.ClusterGUID == "" {
		t.Fatalf("ClusterInformation after startup: %v, %v", r, err)
	}
	if _, err := c.Get(ctx, datastore.Key{Kind: v3.KindNode, Name: "node-a"}); err != nil {
		t.Fatalf("Node after startup: %v", err)
	}
}
