package felix

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

// hostClientEnv carries what a TestHostClient process asks.
const hostClientEnv = "PALISADE_HOST_CLIENT"

// hostAsk is one TestHostClient run: n requests to Dst by Proto, each on
// a socket of its own: "tcp" and "udp" connect, "udp-sendto" sends
// unconnected and reads the answer's source with recvfrom.
type hostAsk struct {
	Proto string
	Dst   string
	N     int
}

// hostAnswer is what one request got: the backend's name, the source it
// saw, the peer the socket reported (getpeername, or recvfrom's source)
// and the error, if any ("refused" for ECONNREFUSED).
type hostAnswer struct {
	Name, Seen, Peer, Err string
	Took                  time.Duration
}

// TestHostClient is not a test: it is a host-networked client, a process
// the connect-time test starts in the node's namespace and in its test
// cgroup. Without hostClientEnv it skips.
func TestHostClient(t *testing.T) {
	raw := os.Getenv(hostClientEnv)
	if raw == "" {
		t.Skip("a host client for the connect-time tests (" + hostClientEnv + " unset)")
	}
	var a hostAsk
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		t.Fatal(err)
	}
	if a.Proto == "tcp-stream" {
		streamClient(a.Dst)
		return
	}
	for range a.N {
		began := time.Now()
		ans := askOnce(a.Proto, a.Dst)
		ans.Took = time.Since(began)
		b, _ := json.Marshal(ans)
		fmt.Printf("answer %s\n", b)
	}
}

// streamClient keeps one TCP connection to dst: it prints the first
// answer and the socket's peer, then, for each line read from stdin,
// sends it and prints the answer, until stdin or the connection ends.
func streamClient(dst string) {
	print := func(a hostAnswer) {
		b, _ := json.Marshal(a)
		fmt.Printf("answer %s\n", b)
	}
	c, err := net.DialTimeout("tcp4", dst, time.Second)
	if err != nil {
		print(hostAnswer{Err: err.Error()})
		return
	}
	defer c.Close()
	r := bufio.NewReader(c)
	in := bufio.NewScanner(os.Stdin)
	for first := true; ; first = false {
		if !first {
			if !in.Scan() {
				return
			}
			if _, err := fmt.Fprintf(c, "%s\n", in.Text()); err != nil {
				print(hostAnswer{Err: err.Error()})
				return
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, err := r.ReadString('\n')
		if err != nil {
			print(hostAnswer{Err: err.Error()})
			return
		}
		a := hostAnswer{Peer: c.RemoteAddr().String()}
		a.Name, a.Seen, _ = strings.Cut(strings.TrimSpace(line), " ")
		print(a)
	}
}

func askOnce(proto, dst string) hostAnswer {
	var ans hostAnswer
	fail := func(err error) hostAnswer {
		ans.Err = err.Error()
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			ans.Err = "refused"
		case errors.Is(err, syscall.EPERM):
			ans.Err = "not permitted"
		}
		return ans
	}
	buf := make([]byte, 200)
	var n int
	if proto == "udp-sendto" {
		pc, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			return fail(err)
		}
		defer pc.Close()
		to, err := net.ResolveUDPAddr("udp4", dst)
		if err != nil {
			return fail(err)
		}
		_ = pc.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := pc.WriteTo([]byte("probe"), to); err != nil {
			return fail(err)
		}
		var from net.Addr
		if n, from, err = pc.ReadFrom(buf); err != nil {
			return fail(err)
		}
		ans.Peer = from.String()
	} else {
		c, err := net.DialTimeout(proto+"4", dst, 500*time.Millisecond)
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		ans.Peer = c.RemoteAddr().String()
		_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if proto == "udp" {
			if _, err := c.Write([]byte("probe")); err != nil {
				return fail(err)
			}
		}
		if n, err = c.Read(buf); err != nil {
			return fail(err)
		}
	}
	ans.Name, ans.Seen, _ = strings.Cut(strings.TrimSpace(string(buf[:n])), " ")
	return ans
}

// testCgroup makes a cgroup of the test's own under the cgroup v2
// hierarchy's root, removed when the test ends (its processes gone).
func testCgroup(t *testing.T, prefix string) string {
	t.Helper()
	root, err := palbpf.CgroupRoot("", "/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy: %v", err)
	}
	dir := filepath.Join(root, "palisade-test-"+prefix)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; ; i++ {
			err := os.Remove(dir)
			if err == nil || os.IsNotExist(err) {
				return
			}
			if i == 50 {
				t.Errorf("removing the test cgroup: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return dir
}

// hostClient starts a TestHostClient process in the network namespace
// netns and the cgroup, asking a; it waits for its answers.
func hostClient(t *testing.T, cgroup, netns string, a hostAsk) []hostAnswer {
	t.Helper()
	cmd := hostClientCmd(cgroup, netns, a)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("host client %+v: %v\n%s", a, err, out)
	}
	return parseAnswers(t, string(out))
}

// hostClientCmd is a TestHostClient process: sh moves itself into the
// cgroup, then becomes the client in the namespace.
func hostClientCmd(cgroup, netns string, a hostAsk) *exec.Cmd {
	raw, _ := json.Marshal(a)
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec nsenter --net="$2" "$3" -test.run='^TestHostClient$' -test.count=1`,
		"sh", cgroup, netns, os.Args[0])
	cmd.Env = append(os.Environ(), hostClientEnv+"="+string(raw))
	return cmd
}

func parseAnswers(t *testing.T, out string) []hostAnswer {
	t.Helper()
	var got []hostAnswer
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "answer "); ok {
			var a hostAnswer
			if err := json.Unmarshal([]byte(rest), &a); err != nil {
				t.Fatal(err)
			}
			got = append(got, a)
		}
	}
	return got
}

// ctlbServices feeds the connect-time tests' Services: 10.96.0.10 TCP 80
// and UDP 53 on web (10.65.0.1) and other (10.65.0.3), port 7070; and
// 10.96.0.11 TCP and UDP 80 without endpoints.
func ctlbServices(feed *sliceFeed) {
	feed.service("ns-a", "backend", "10.96.0.10", calc.ServiceSpecPort{Name: "http", Proto: "tcp", Port: 80}, calc.ServiceSpecPort{Name: "dns", Proto: "udp", Port: 53})
	ports := []calc.ServicePort{{Proto: "tcp", Port: namePort, Name: "http"}, {Proto: "udp", Port: namePort, Name: "dns"}}
	feed.lbSlice("ns-a", "backend-1", "backend", ports, ready("10.65.0.1"), ready("10.65.0.3"))
	feed.service("ns-a", "empty", "10.96.0.11", calc.ServiceSpecPort{Proto: "tcp", Port: 80}, calc.ServiceSpecPort{Proto: "udp", Port: 80})
	feed.c <- []calc.Update{{Key: datastore.Key{Kind: calc.KindEndpointSlicesSynced}, Value: &calc.EndpointSlice{}}}
}

// TestBPFConnectTimeLB: with real namespaces and packets, a
// host-networked client (a process of the node's network namespace, in
// the test's cgroup, where felix attaches the connect-time programs:
// FELIX_CGROUPV2PATH) reaches a ClusterIP with no kube-proxy in the
// namespace: TCP, connected UDP and unconnected UDP (sendto/recvfrom)
// reach both backends, which see the node's address; the socket reports
// the ClusterIP as its peer (getpeername, recvfrom); a Service without
// endpoints refuses at once (as kube-proxy refuses a host: TCP refused,
// UDP not permitted); a process of another namespace in the same
// cgroup is left alone; bpfHostNetworkedNATWithoutCTLB Disabled leaves
// UDP alone and bpfConnectTimeLoadBalancing Disabled everything.
func TestBPFConnectTimeLB(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	cg := testCgroup(t, c.prefix)
	feed := &sliceFeed{c: make(chan []calc.Update)}
	cfg := c.felixConfigOf()
	cfg.EndpointSlices = feed
	cfg.Environ = append(cfg.Environ, "FELIX_CGROUPV2PATH="+cg)
	runFelix(t, c.ctx, c.cancel, cfg)
	setupPods(c)
	nameServer(t, c.pods["web"].run, "web")
	nameServer(t, c.pods["other"].run, "other")
	ctlbServices(feed)
	node := c.node.Path()
	httpF, dnsF := "10.96.0.10:80", "10.96.0.10:53"

	c.waitFor("a host client reaches the ClusterIP", func() bool {
		a := hostClient(t, cg, node, hostAsk{Proto: "tcp", Dst: httpF, N: 1})
		return len(a) == 1 && a[0].Err == ""
	})
	sub := func(name string, f func(t *testing.T)) {
		t.Run(name, func(st *testing.T) {
			c.t = st
			defer func() { c.t = t }()
			f(st)
		})
	}
	sub("both backends, the node's address, the ClusterIP as peer", func(t *testing.T) {
		for _, a := range []hostAsk{{"tcp", httpF, 30}, {"udp", dnsF, 30}, {"udp-sendto", dnsF, 30}} {
			got := map[string]int{}
			for _, ans := range hostClient(t, cg, node, a) {
				got[ans.Name]++
				if ans.Err != "" {
					t.Errorf("%s %s: %s", a.Proto, a.Dst, ans.Err)
					continue
				}
				if host, _, _ := net.SplitHostPort(ans.Seen); host != nodeAddr.String() {
					t.Errorf("%s %s: %s saw the client as %s, want the node's %s", a.Proto, a.Dst, ans.Name, ans.Seen, nodeAddr)
				}
				if ans.Peer != a.Dst {
					t.Errorf("%s %s: the socket's peer is %s, want the ClusterIP", a.Proto, a.Dst, ans.Peer)
				}
			}
			if got["web"] == 0 || got["other"] == 0 || got["web"]+got["other"] != a.N {
				t.Errorf("%s %s: answers %v, want both web and other, %d in all", a.Proto, a.Dst, got, a.N)
			}
		}
	})
	sub("no endpoints: refused at once", func(t *testing.T) {
		// As kube-proxy's REJECT answers a host: TCP refused, UDP not
		// permitted (connected or not).
		for proto, want := range map[string]string{"tcp": "refused", "udp": "not permitted", "udp-sendto": "not permitted"} {
			ans := hostClient(t, cg, node, hostAsk{Proto: proto, Dst: "10.96.0.11:80", N: 1})
			if len(ans) != 1 || ans[0].Err != want {
				t.Fatalf("%s to a Service without endpoints: %+v, want %s", proto, ans, want)
			}
			if d := ans[0].Took; d > 200*time.Millisecond {
				t.Errorf("%s refused after %s, want at once", proto, d)
			}
		}
	})
	sub("another namespace's sockets are left alone", func(t *testing.T) {
		// The external namespace routes only the pods' pool: the
		// ClusterIP, untranslated, is unreachable from it.
		ans := hostClient(t, cg, c.ext.Path(), hostAsk{Proto: "tcp", Dst: httpF, N: 1})
		if len(ans) != 1 || !strings.Contains(ans[0].Err, "network is unreachable") {
			t.Errorf("from the external namespace: %+v, want the ClusterIP untranslated (network is unreachable)", ans)
		}
	})
	sub("bpfHostNetworkedNATWithoutCTLB Disabled: TCP only", func(t *testing.T) {
		c.applyFelixConfig("  bpfHostNetworkedNATWithoutCTLB: Disabled\n")
		c.waitFor("UDP left alone", func() bool {
			a := hostClient(t, cg, node, hostAsk{Proto: "udp", Dst: dnsF, N: 1})
			return len(a) == 1 && a[0].Err != ""
		})
		if a := hostClient(t, cg, node, hostAsk{Proto: "tcp", Dst: httpF, N: 5}); len(a) != 5 || a[0].Err != "" || a[4].Err != "" {
			t.Errorf("TCP with UDP left alone: %+v", a)
		}
	})
	sub("bpfConnectTimeLoadBalancing Disabled: nothing", func(t *testing.T) {
		c.applyFelixConfig("  bpfConnectTimeLoadBalancing: Disabled\n")
		c.waitFor("TCP left alone", func() bool {
			a := hostClient(t, cg, node, hostAsk{Proto: "tcp", Dst: httpF, N: 1})
			return len(a) == 1 && a[0].Err != ""
		})
		c.applyFelixConfig("")
		c.waitFor("translated again", func() bool {
			a := hostClient(t, cg, node, hostAsk{Proto: "udp", Dst: dnsF, N: 1})
			return len(a) == 1 && a[0].Err == ""
		})
	})
}

// TestBPFConnectTimeLBRestart kills felix (SIGKILL) while a host client
// holds a TCP connection through a ClusterIP: the connection carries on
// with no felix and across the next one, whose start updates the pinned
// cgroup links in place; a new host connection made while no felix runs
// is still translated (the programs stay attached), and after the
// restart the first connection's peer is still the ClusterIP.
func TestBPFConnectTimeLBRestart(t *testing.T) {
	c := newClusterNoFelix(t, "BPF", false)
	cg := testCgroup(t, c.prefix)
	args := childArgs{Environ: []string{"FELIX_CGROUPV2PATH=" + cg}, Services: true}
	first := c.startChildWith(t, "felix-1.log", args)
	setupPods(c)
	nameServer(t, c.pods["web"].run, "web")
	nameServer(t, c.pods["other"].run, "other")
	node := c.node.Path()
	httpF := "10.96.0.10:80"
	c.waitFor("a host client reaches the ClusterIP", func() bool {
		a := hostClient(t, cg, node, hostAsk{Proto: "tcp", Dst: httpF, N: 1})
		return len(a) == 1 && a[0].Err == ""
	})

	cmd := hostClientCmd(cg, node, hostAsk{Proto: "tcp-stream", Dst: httpF})
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	next := func() hostAnswer {
		t.Helper()
		for lines.Scan() {
			if rest, ok := strings.CutPrefix(lines.Text(), "answer "); ok {
				var a hostAnswer
				if err := json.Unmarshal([]byte(rest), &a); err != nil {
					t.Fatal(err)
				}
				return a
			}
		}
		t.Fatalf("the host client ended: %v", lines.Err())
		return hostAnswer{}
	}
	hello := next()
	if hello.Err != "" || hello.Peer != httpF {
		t.Fatalf("the host client's connection: %+v, want one to %s", hello, httpF)
	}
	backend := hello.Name
	exchange := func(when string) {
		t.Helper()
		for i := range 20 {
			fmt.Fprintf(stdin, "%s-%d\n", when, i)
			a := next()
			if a.Err != "" || a.Name != backend || a.Seen != fmt.Sprintf("%s-%d", when, i) || a.Peer != httpF {
				t.Fatalf("%s: exchange %d on the open connection: %+v, want %s echoing, peer %s", when, i, a, backend, httpF)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	exchange("before")
	links := func() string {
		t.Helper()
		id, err := palbpf.NamespaceID(c.nodeRun)
		if err != nil {
			t.Fatal(err)
		}
		pins, _ := filepath.Glob(filepath.Join(palbpf.DefaultRoot, id, "links", "ctlb-*"))
		var ids []string
		for _, p := range pins {
			l, err := link.LoadPinnedLink(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			info, err := l.Info()
			l.Close()
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, fmt.Sprintf("%s=%d", filepath.Base(p), info.ID))
		}
		return strings.Join(ids, " ")
	}
	before := links()
	if n := strings.Count(before, "="); n != palbpf.CTLBHooks {
		t.Fatalf("pinned connect-time links: %s, want %d", before, palbpf.CTLBHooks)
	}

	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Process.Wait()
	exchange("no-felix")
	if a := hostClient(t, cg, node, hostAsk{Proto: "tcp", Dst: httpF, N: 5}); len(a) != 5 || a[0].Err != "" || a[4].Err != "" || a[4].Peer != httpF {
		t.Errorf("new host connections with no felix: %+v", a)
	}

	restarted := time.Now()
	c.startChildWith(t, "felix-2.log", args)
	c.waitProgrammedSince("ns-a", "web", restarted)
	exchange("restarted")
	if after := links(); after != before {
		t.Errorf("the restarted felix replaced the connect-time links (%s) instead of updating them: %s", before, after)
	}
	if a := hostClient(t, cg, node, hostAsk{Proto: "udp", Dst: "10.96.0.10:53", N: 5}); len(a) != 5 || a[0].Err != "" || a[4].Err != "" {
		t.Errorf("new host UDP exchanges after the restart: %+v", a)
	}
}
