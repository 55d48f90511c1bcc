package startup

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/client"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

// nsSysctl writes sysctls from a thread inside the test namespace, so the
// machine's own forwarding settings are never touched.
type nsSysctl struct {
	t *testing.T
	n *testNS
}

func (s nsSysctl) Set(name, value string) error {
	return s.n.do(s.t, func() error { return ProcSysctl{}.Set(name, value) })
}

func (s nsSysctl) get(name string) string {
	var v string
	err := s.n.do(s.t, func() error {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
		v = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		s.t.Fatalf("reading %s in %s: %v", name, s.n.name, err)
	}
	return v
}

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func pools(t *testing.T, c *client.Client) map[string]*v3.IPPool {
	t.Helper()
	rs, _, err := c.List(context.Background(), datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*v3.IPPool{}
	for _, r := range rs {
		p := r.(*v3.IPPool)
		out[p.Name] = p
	}
	return out
}

func TestRun(t *testing.T) {
	n := newNS(t)
	n.veth(t, "eth0", "p-eth0", "198.18.0.2/24", "fd00:198:18::2/64")
	h := NetlinkHost{Handle: n.handle}
	sys := nsSysctl{t: t, n: n}
	ctx := context.Background()

	for _, tc := range []struct {
		name      string
		env       map[string]string
		prePool   string // a pool created before startup
		wantV4    string
		wantV6    string
		wantAS    string
		wantPools map[string]string // name → CIDR
		wantV6Fwd bool
		wantRef   string // the k8s orchRef's nodeName
	}{
		{
			name:      "defaults",
			env:       map[string]string{"NODENAME": "node-a"},
			wantV4:    "198.18.0.2/24",
			wantPools: map[string]string{"default-ipv4-ippool": "192.168.0.0/16"},
		},
		{
			name: "AS, IPv6 and configured pools",
			env: map[string]string{"NODENAME": "Node-B", "AS": "64513", "IP6": "autodetect",
				"CALICO_IPV4POOL_CIDR": "10.244.0.0/16", "CALICO_IPV4POOL_BLOCK_SIZE": "24",
				"CALICO_IPV4POOL_VXLAN": "Always", "CALICO_IPV4POOL_NAT_OUTGOING": "false",
				"CALICO_IPV6POOL_CIDR": "fd10::/48"},
			wantV4: "198.18.0.2/24", wantV6: "fd00:198:18::2/64", wantAS: "64513",
			wantPools: map[string]string{"default-ipv4-ippool": "10.244.0.0/16", "default-ipv6-ippool": "fd10::/48"},
			wantV6Fwd: true,
		},
		{
			name:      "no default pools",
			env:       map[string]string{"NODENAME": "node-c", "NO_DEFAULT_POOLS": "true", "IP": "198.18.0.2"},
			wantV4:    "198.18.0.2/24",
			wantPools: map[string]string{},
		},
		{
			name:      "a Kubernetes node reference",
			env:       map[string]string{"NODENAME": "node-k", "CALICO_K8S_NODE_REF": "kube-node-k"},
			wantV4:    "198.18.0.2/24",
			wantPools: map[string]string{"default-ipv4-ippool": "192.168.0.0/16"},
			wantRef:   "kube-node-k",
		},
		{
			name:      "an existing pool stops the default",
			env:       map[string]string{"NODENAME": "node-d"},
			prePool:   "10.10.0.0/16",
			wantV4:    "198.18.0.2/24",
			wantPools: map[string]string{"mine": "10.10.0.0/16"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client.New(etcdtest.NewStore(t, etcdtest.Start(t)))
			if tc.prePool != "" {
				if _, err := c.Create(ctx, &v3.IPPool{ObjectMeta: v3.ObjectMeta{Name: "mine"}, Spec: v3.IPPoolSpec{CIDR: tc.prePool}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := sys.Set("net.ipv4.ip_forward", "0"); err != nil {
				t.Fatal(err)
			}
			cfg, err := FromEnv(env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			cfg.NodenameFile = filepath.Join(t.TempDir(), "calico", "nodename")
			res, err := Run(ctx, cfg, c, h, sys)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			name := strings.ToLower(tc.env["NODENAME"])
			r, err := c.Get(ctx, datastore.Key{Kind: v3.KindNode, Name: name})
			if err != nil {
				t.Fatalf("node %q not stored: %v", name, err)
			}
			node := r.(*v3.Node)
			if node.Spec.BGP == nil || node.Spec.BGP.IPv4Address != tc.wantV4 || node.Spec.BGP.IPv6Address != tc.wantV6 {
				t.Errorf("node %q spec.bgp = %+v, want ipv4Address %q ipv6Address %q", name, node.Spec.BGP, tc.wantV4, tc.wantV6)
			}
			gotAS := ""
			if node.Spec.BGP != nil && node.Spec.BGP.ASNumber != nil {
				gotAS = node.Spec.BGP.ASNumber.String()
			}
			if gotAS != tc.wantAS {
				t.Errorf("node %q asNumber = %q, want %q", name, gotAS, tc.wantAS)
			}
			gotRef := ""
			for _, o := range node.Spec.OrchRefs {
				if o.Orchestrator == "k8s" {
					gotRef = o.NodeName
				}
			}
			if gotRef != tc.wantRef {
				t.Errorf("node %q k8s orchRef = %q, want %q", name, gotRef, tc.wantRef)
			}
			if res.Node.Name != name {
				t.Errorf("Result.Node.Name = %q, want %q", res.Node.Name, name)
			}
			got := pools(t, c)
			if len(got) != len(tc.wantPools) {
				t.Errorf("pools = %v, want %v", got, tc.wantPools)
			}
			for pn, cidr := range tc.wantPools {
				if got[pn] == nil || got[pn].Spec.CIDR != cidr {
					t.Errorf("pool %q = %+v, want cidr %s", pn, got[pn], cidr)
				}
			}
			if p := got["default-ipv4-ippool"]; p != nil && tc.env["CALICO_IPV4POOL_BLOCK_SIZE"] == "24" {
				if p.Spec.BlockSize != 24 || p.Spec.VXLANMode != v3.EncapAlways || p.Spec.NATOutgoing {
					t.Errorf("pool from env = %+v, want blockSize 24, vxlanMode Always, natOutgoing false", p.Spec)
				}
			} else if p != nil && (p.Spec.BlockSize != 26 || !p.Spec.NATOutgoing) {
				t.Errorf("default pool = %+v, want blockSize 26, natOutgoing true", p.Spec)
			}
			b, err := os.ReadFile(cfg.NodenameFile)
			if err != nil || string(b) != name {
				t.Errorf("nodename file = %q, %v; want %q", b, err, name)
			}
			if v := sys.get("net.ipv4.ip_forward"); v != "1" {
				t.Errorf("net.ipv4.ip_forward in %s = %s, want 1", n.name, v)
			}
			if tc.wantV6Fwd {
				if v := sys.get("net.ipv6.conf.all.forwarding"); v != "1" {
					t.Errorf("net.ipv6.conf.all.forwarding in %s = %s, want 1", n.name, v)
				}
			}
			ci, err := c.Get(ctx, datastore.Key{Kind: v3.KindClusterInformation, Name: "default"})
			if err != nil {
				t.Fatalf("ClusterInformation: %v", err)
			}
			spec := ci.(*v3.ClusterInformation).Spec
			if len(spec.ClusterGUID) != 32 || spec.DatastoreReady == nil || !*spec.DatastoreReady || spec.CalicoVersion == "" {
				t.Errorf("ClusterInformation spec = %+v, want a 32-hex GUID, datastoreReady true and a version", spec)
			}
		})
	}
}

// TestRunUpdates runs startup twice: the second run keeps the GUID and
// the stored address, corrects a wrong stored /32, and sets a new AS.
func TestRunUpdates(t *testing.T) {
	n := newNS(t)
	n.veth(t, "eth0", "p-eth0", "198.18.0.2/24")
	h := NetlinkHost{Handle: n.handle}
	ctx := context.Background()
	c := client.New(etcdtest.NewStore(t, etcdtest.Start(t)))
	base := map[string]string{"NODENAME": "node-a", "CALICO_SKIP_SYSCTLS": "true"}
	cfg, err := FromEnv(env(base))
	if err != nil {
		t.Fatal(err)
	}
	cfg.NodenameFile = filepath.Join(t.TempDir(), "nodename")
	if _, err := Run(ctx, cfg, c, h, nil); err != nil {
		t.Fatal(err)
	}
	ci1, _ := c.Get(ctx, datastore.Key{Kind: v3.KindClusterInformation, Name: "default"})

	// Someone stores the troubleshooting story's wrong /32.
	r, _ := c.Get(ctx, datastore.Key{Kind: v3.KindNode, Name: "node-a"})
	node := r.(*v3.Node)
	node.Spec.BGP.IPv4Address = "198.18.0.2/32"
	node.Labels = map[string]string{"rack": "r1"}
	if _, err := c.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	cfg.AS = "65001"
	res, err := Run(ctx, cfg, c, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Node.Spec.BGP.IPv4Address; got != "198.18.0.2/24" {
		t.Errorf("ipv4Address after rerun = %s, want the interface's 198.18.0.2/24", got)
	}
	if got := res.Node.Spec.BGP.ASNumber; got == nil || got.String() != "65001" {
		t.Errorf("asNumber after rerun = %v, want 65001", got)
	}
	if res.Node.Labels["rack"] != "r1" {
		t.Errorf("labels after rerun = %v, want the stored rack=r1 kept", res.Node.Labels)
	}
	ci2, _ := c.Get(ctx, datastore.Key{Kind: v3.KindClusterInformation, Name: "default"})
	if g1, g2 := ci1.(*v3.ClusterInformation).Spec.ClusterGUID, ci2.(*v3.ClusterInformation).Spec.ClusterGUID; g1 != g2 {
		t.Errorf("cluster GUID changed from %s to %s", g1, g2)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CALICO_NETWORKING_BACKEND": "calico-bgp"}, `CALICO_NETWORKING_BACKEND "calico-bgp"`},
		{map[string]string{"IP": "198.18.0.300"}, `IP "198.18.0.300"`},
		{map[string]string{"IP": "fd00::1"}, "want an IPv4 address"},
		{map[string]string{"IP6": "198.18.0.1"}, "want an IPv6 address"},
		{map[string]string{"AS": "notanumber"}, `AS "notanumber"`},
		{map[string]string{"IP_AUTODETECTION_METHOD": "interface=("}, "IP_AUTODETECTION_METHOD"},
		{map[string]string{"CALICO_IPV4POOL_BLOCK_SIZE": "x"}, "CALICO_IPV4POOL_BLOCK_SIZE"},
		{map[string]string{"NO_DEFAULT_POOLS": "maybe"}, "NO_DEFAULT_POOLS"},
		{map[string]string{"CALICO_IPV4POOL_VXLAN": "Sometimes"}, "CALICO_IPV4POOL_VXLAN"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			cfg, err := FromEnv(env(tc.env))
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("config %v: error %v, want one containing %q", tc.env, err, tc.want)
			}
		})
	}
}
