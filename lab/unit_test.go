package lab

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseRoutes(t *testing.T) {
	a := netip.MustParseAddr
	out := `10.244.11.64/26 via 198.18.0.12 dev eth0 proto 201
blackhole 10.244.197.0/26 proto 201
10.244.158.128/26 proto 201 \    nexthop via 198.18.0.13 dev eth0 weight 1 \    nexthop via 198.18.0.14 dev eth0 weight 1
10.244.1.1 via 198.18.0.15 dev eth0 proto 201
`
	got := parseRoutes(out)
	want := []BGPRoute{
		{Prefix: netip.MustParsePrefix("10.244.11.64/26"), Via: []netip.Addr{a("198.18.0.12")}},
		{Prefix: netip.MustParsePrefix("10.244.197.0/26")},
		{Prefix: netip.MustParsePrefix("10.244.158.128/26"), Via: []netip.Addr{a("198.18.0.13"), a("198.18.0.14")}},
		{Prefix: netip.MustParsePrefix("10.244.1.1/32"), Via: []netip.Addr{a("198.18.0.15")}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseRoutes:\n got %+v\nwant %+v", got, want)
	}
	for _, c := range []struct {
		name    string
		addr    string
		gw      string
		routeOK bool
	}{
		{"block via its node", "10.244.11.65", "198.18.0.12", true},
		{"block via another node", "10.244.11.65", "198.18.0.13", false},
		{"ECMP second hop", "10.244.158.130", "198.18.0.14", true},
		{"own block is a blackhole", "10.244.197.5", "198.18.0.11", false},
		{"no route", "10.9.9.9", "198.18.0.12", false},
		{"host route wins over nothing", "10.244.1.1", "198.18.0.15", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := routeVia(want, a(c.addr), a(c.gw)); got != c.routeOK {
				t.Errorf("routeVia(%s, %s) = %v, want %v", c.addr, c.gw, got, c.routeOK)
			}
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	bin := t.TempDir()
	for _, b := range []string{"calico-node", "calicoctl", "calico", "calico-ipam"} {
		if err := os.WriteFile(filepath.Join(bin, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		o       Options
		wantErr string
		check   func(Options) bool
	}{
		{name: "defaults", o: Options{Name: "a"}, check: func(o Options) bool {
			return o.Nodes == 3 && o.RR == RRNone && o.Peering == PeeringMesh && o.Etcd == EtcdEmbedded && o.PoolCIDR == "10.244.0.0/16"
		}},
		{name: "rr peering by default with a reflector", o: Options{Name: "a", RR: RRBird1}, check: func(o Options) bool { return o.Peering == PeeringRR }},
		{name: "random name", o: Options{}, check: func(o Options) bool { return nameRE.MatchString(o.Name) }},
		{name: "bad name", o: Options{Name: "A_b"}, wantErr: `lab name "A_b"`},
		{name: "too many nodes", o: Options{Name: "a", Nodes: 201}, wantErr: "201 nodes"},
		{name: "bad reflector", o: Options{Name: "a", RR: "quagga"}, wantErr: `route reflector "quagga"`},
		{name: "rr peering without reflector", o: Options{Name: "a", Peering: PeeringRR}, wantErr: "needs a route reflector"},
		{name: "bad etcd", o: Options{Name: "a", Etcd: "consul"}, wantErr: `etcd "consul"`},
		{name: "bad pool", o: Options{Name: "a", PoolCIDR: "10.0.0.0/33"}, wantErr: `pool "10.0.0.0/33"`},
		{name: "missing binaries", o: Options{Name: "a", BinDir: "/nonexistent"}, wantErr: "calico-node not found in /nonexistent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			if o.BinDir == "" {
				o.BinDir = bin
			}
			err := o.defaults()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || !c.check(o) {
				t.Fatalf("defaults: %v, %+v", err, o)
			}
		})
	}
}

// TestBirdConfigs: the configurations the lab writes parse with the BIRD
// that runs them (bird -p).
func TestBirdConfigs(t *testing.T) {
	nodes := []Node{{Name: "node1", IP: nodeAddr(1)}, {Name: "node2", IP: nodeAddr(2)}}
	for _, c := range []struct {
		name, bin, conf string
	}{
		{"rr bird2", bird2Bin, rrConfig(RRBird2, nodes)},
		{"rr bird1", "bird1", rrConfig(RRBird1, nodes)},
		{"border", bird2Bin, borderConfig(nodes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := c.bin
			if bin == "bird1" {
				dir := findBird1(binDir)
				if dir == "" {
					t.Skip("BIRD 1.6 is not unpacked in .tools/bird1 (make deps)")
				}
				bin = filepath.Join(dir, "bird")
			}
			if _, err := os.Stat(bin); err != nil {
				t.Skipf("%s is not installed (make deps)", bin)
			}
			f := filepath.Join(t.TempDir(), "bird.conf")
			if err := os.WriteFile(f, []byte(c.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, "-p", "-c", f).CombinedOutput(); err != nil {
				t.Fatalf("%s -p: %v\n%s\n%s", bin, err, out, c.conf)
			}
			for _, n := range nodes {
				if !strings.Contains(c.conf, "neighbor "+n.IP.String()+" as 64512") {
					t.Errorf("no session with %s:\n%s", n.Name, c.conf)
				}
			}
		})
	}
}
