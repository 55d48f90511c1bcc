package felix

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// TestBPFNewInterfaceClosedFromTheStart: a workload interface is closed
// to traffic from its first moment, not only once its programs are
// attached. The CNI plugin adds the host's route to a pod right after
// its veth (before felix has attached anything: a TCX attachment waits
// for RCU grace periods, tens of milliseconds); datagrams sent to the
// pod's address all the while, from outside the node, must not reach
// it, though no endpoint ever names the interface.
func TestBPFNewInterfaceClosedFromTheStart(t *testing.T) {
	c := newCluster(t, "BPF")
	setupPods(c)
	c.waitProgrammed("ns-a", c.pods["web"].wep.Name)
	for i := range 8 {
		ip := netip.AddrFrom4([4]byte{10, 65, 0, byte(20 + i)})
		iface := fmt.Sprintf("caliwindow%04d", i)
		p := &pod{ns: "ns-a", name: fmt.Sprintf("window%d", i), ip: ip, iface: iface}
		p.netns = nstest.New(t, c.prefix, p.name)
		p.run = nstest.Runner(t, p.netns)
		var got atomic.Int64
		var conn net.PacketConn
		if err := p.run.Do(func() error {
			var err error
			conn, err = net.ListenPacket("udp4", ":9500")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		go func() {
			buf := make([]byte, 64)
			for {
				if _, _, err := conn.ReadFrom(buf); err != nil {
					return
				}
				got.Add(1)
			}
		}()
		// The sender starts before the interface exists.
		stop := make(chan struct{})
		sent := make(chan int)
		go func() {
			var out net.Conn
			if err := c.extRun.Do(func() error {
				var err error
				out, err = net.Dial("udp4", netip.AddrPortFrom(ip, 9500).String())
				return err
			}); err != nil {
				sent <- -1
				return
			}
			defer out.Close()
			n := 0
			for {
				select {
				case <-stop:
					sent <- n
					return
				default:
				}
				_, _ = out.Write([]byte("x"))
				n++
				if n%16 == 0 {
					runtime.Gosched()
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		podH, podNS := nstest.Handle(t, p.netns)
		if err := nstest.Workload(c.nodeH, podH, podNS, iface, ip); err != nil {
			t.Fatal(err)
		}
		// The CNI plugin's route, at once.
		c.node.MustRun(t, "ip", "route", "add", ip.String()+"/32", "dev", iface, "scope", "link")
		time.Sleep(300 * time.Millisecond)
		close(stop)
		n := <-sent
		conn.Close()
		if n < 0 {
			t.Fatal("the sender could not start")
		}
		if g := got.Load(); g > 0 {
			t.Errorf("interface %s: %d of %d datagrams sent while it was new reached the pod; want none", iface, g, n)
		}
		c.node.MustRun(t, "ip", "link", "del", iface)
	}
}

// TestBPFDeviceGroupRepaired: a workload interface whose device group is
// changed by hand is closed to forwarded traffic by the guard (the group
// says its programs are attached), and felix gives it its group back.
func TestBPFDeviceGroupRepaired(t *testing.T) {
	c := newCluster(t, "BPF")
	setupPods(c)
	web := c.pods["web"]
	c.waitProgrammed("ns-a", web.wep.Name)
	c.expect(allow("ext", "web", "tcp", 8080))
	group := func() uint32 {
		l, err := c.nodeH.LinkByName(web.iface)
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().Group
	}
	c.node.MustRun(t, "ip", "link", "set", "dev", web.iface, "group", "0")
	// Until felix's next apply (iptablesRefreshInterval is 1s) the guard
	// drops what is forwarded to it.
	if ok, _ := c.send(allow("ext", "web", "tcp", 8080)); ok && group() == 0 {
		t.Error("ext reached web while web's interface had device group 0")
	}
	c.waitFor("the device group given back", func() bool { return group() == palbpf.AttachedGroup })
	c.expect(allow("ext", "web", "tcp", 8080))
}
