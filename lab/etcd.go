package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdpki"
)

// etcdBin is Debian's etcd (etcd-server).
const etcdBin = "/usr/bin/etcd"

// clusterAddrs are the fabric addresses of the members of an etcd cluster
// (Options.Etcd EtcdCluster): etcd1, etcd2, etcd3.
var clusterAddrs = []netip.Addr{
	netip.MustParseAddr("198.18.0.241"), netip.MustParseAddr("198.18.0.242"), netip.MustParseAddr("198.18.0.243"),
}

// etcdMember is one member of the lab's own etcd (external or cluster).
type etcdMember struct {
	// Name is the member's name, its namespace's suffix and its process
	// role ("etcd", or "etcd1" to "etcd3").
	Name string
	Addr netip.Addr
}

// ClientURL is where the member serves clients.
func (m etcdMember) ClientURL() string { return "https://" + netip.AddrPortFrom(m.Addr, 2379).String() }

func (m etcdMember) peerURL() string { return "https://" + netip.AddrPortFrom(m.Addr, 2380).String() }

// etcdMembers lists the lab's etcd members (none for the embedded etcd).
func (l *Lab) etcdMembers() []etcdMember {
	switch l.st.Options.Etcd {
	case EtcdExternal:
		return []etcdMember{{Name: "etcd", Addr: etcdAddr}}
	case EtcdCluster:
		var ms []etcdMember
		for i, a := range clusterAddrs {
			ms = append(ms, etcdMember{Name: fmt.Sprintf("etcd%d", i+1), Addr: a})
		}
		return ms
	}
	return nil
}

// EtcdMembers names the lab's etcd members ("etcd", or "etcd1" to
// "etcd3"; none when node 1 serves the embedded etcd).
func (l *Lab) EtcdMembers() []string {
	var names []string
	for _, m := range l.etcdMembers() {
		names = append(names, m.Name)
	}
	return names
}

// etcdEndpoints are the client URLs of the lab's etcd: every member's, or
// node 1's embedded etcd.
func (l *Lab) etcdEndpoints() []string {
	var eps []string
	for _, m := range l.etcdMembers() {
		eps = append(eps, m.ClientURL())
	}
	if len(eps) == 0 {
		eps = []string{"https://" + netip.AddrPortFrom(l.st.Nodes[0].IP, 2379).String()}
	}
	return eps
}

// JoinFile is the lab's join file: the calicoctl configuration (endpoints,
// CA and client certificate) that every node but the one serving the
// embedded etcd runs with, as other nodes of a real cluster would.
func (l *Lab) JoinFile() string { return l.path("etcd", etcdpki.JoinFileName) }

// etcdClientFiles are the CA and client certificate files of the join
// file, for the CNI plugins (which take only files) and for `lab exec`.
func (l *Lab) etcdClientFiles() etcdpki.Files {
	if l.st.Options.Etcd == EtcdEmbedded {
		return etcdpki.In(l.path("etcd", "client"))
	}
	return etcdpki.In(l.path("etcd", "tls"))
}

// embeddedJoinFile is where node 1 writes the join file of its embedded
// etcd.
func (l *Lab) embeddedJoinFile() string {
	return l.nodeDir(l.st.Nodes[0].Name, "etcd", etcdpki.JoinFileName)
}

// takeJoinFile copies the join file node 1 wrote for its embedded etcd to
// the lab's, and its certificates out as files, as an operator hands the
// join file to the other nodes.
func (l *Lab) takeJoinFile() error {
	spec, err := etcdpki.ReadJoin(l.embeddedJoinFile())
	if err != nil {
		return err
	}
	if _, err := etcdpki.WriteClientFiles(l.etcdClientFiles().Dir, spec); err != nil {
		return err
	}
	b, err := os.ReadFile(l.embeddedJoinFile())
	if err != nil {
		return err
	}
	return os.WriteFile(l.JoinFile(), b, 0o600)
}

// startEtcd makes the etcd's certificates and join file, then runs each
// member in its own namespace on the fabric and waits until all are
// healthy.
func (l *Lab) startEtcd(ctx context.Context) error {
	members := l.etcdMembers()
	var hosts []string
	for _, m := range members {
		hosts = append(hosts, m.Addr.String())
	}
	res, err := etcdpki.Ensure(l.path("etcd", "tls"), hosts, time.Now())
	if err != nil {
		return fmt.Errorf("lab etcd: %w", err)
	}
	if err := etcdpki.WriteJoin(l.JoinFile(), l.etcdEndpoints(), &res.Files); err != nil {
		return fmt.Errorf("lab etcd: %w", err)
	}
	for _, m := range members {
		l.say("creating etcd member %s: namespace %s%s, %s/24, %s (TLS, client certificates)", m.Name, l.st.Prefix, m.Name, m.Addr, etcdBin)
		if _, err := l.attachNS(ctx, m.Name, m.Name, m.Addr); err != nil {
			return err
		}
		if err := l.runEtcdMember(m); err != nil {
			return err
		}
	}
	for _, m := range members {
		if err := l.waitEtcdHealthy(ctx, m, 30*time.Second); err != nil {
			return err
		}
	}
	l.say("✓ etcd serves %s; join file %s", strings.Join(l.etcdEndpoints(), ","), l.JoinFile())
	return nil
}

// runEtcdMember starts one member's process (again, after StopEtcd).
func (l *Lab) runEtcdMember(m etcdMember) error {
	members := l.etcdMembers()
	var initial []string
	for _, o := range members {
		initial = append(initial, o.Name+"="+o.peerURL())
	}
	tls := l.etcdClientFiles() // the server certificate is in the same directory
	// A cluster gets timers a busy 2-core machine does not trip over;
	// one member elects itself at once anyway.
	heartbeat, election := "20", "200"
	if len(members) > 1 {
		heartbeat, election = "50", "500"
	}
	argv := []string{etcdBin, "--name", m.Name, "--data-dir", l.path("etcd", m.Name, "data"),
		"--listen-client-urls", m.ClientURL() + ",https://127.0.0.1:2379", "--advertise-client-urls", m.ClientURL(),
		"--listen-peer-urls", m.peerURL(), "--initial-advertise-peer-urls", m.peerURL(),
		"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
		"--initial-cluster-token", "pl-" + l.st.Name,
		"--cert-file", tls.ServerCert, "--key-file", tls.ServerKey, "--client-cert-auth", "--trusted-ca-file", tls.CA,
		"--peer-cert-file", tls.ServerCert, "--peer-key-file", tls.ServerKey, "--peer-client-cert-auth", "--peer-trusted-ca-file", tls.CA,
		// Health and metrics in plain HTTP, on the member's own loopback.
		"--listen-metrics-urls", "http://127.0.0.1:2381",
		"--heartbeat-interval", heartbeat, "--election-timeout", election, "--logger", "zap", "--log-level", "warn"}
	p, err := start(l.st.Prefix+m.Name, m.Name, l.path("etcd", m.Name+".log"), argv, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		return err
	}
	return l.recordProc(m.Name, p)
}

// member finds a member by name.
func (l *Lab) member(name string) (etcdMember, error) {
	for _, m := range l.etcdMembers() {
		if m.Name == name {
			return m, nil
		}
	}
	return etcdMember{}, fmt.Errorf("lab %s has no etcd member %q (it has %v)", l.st.Name, name, l.EtcdMembers())
}

// StopEtcd ends an etcd member with sig: SIGKILL as a crash, SIGTERM as a
// clean stop. It returns once the process is gone.
func (l *Lab) StopEtcd(name string, sig syscall.Signal) error {
	if _, err := l.member(name); err != nil {
		return err
	}
	p, ok := l.Proc(name)
	if !ok {
		return fmt.Errorf("etcd member %s was never started", name)
	}
	if err := p.Signal(sig); err != nil {
		return err
	}
	if !p.wait(10 * time.Second) {
		return fmt.Errorf("etcd member %s (pid %d) survived %s", name, p.PID, sig)
	}
	return nil
}

// StartEtcd starts a stopped member again on its data and waits until it
// is healthy.
func (l *Lab) StartEtcd(ctx context.Context, name string) error {
	m, err := l.member(name)
	if err != nil {
		return err
	}
	if p, ok := l.Proc(name); ok && p.Alive() {
		return fmt.Errorf("etcd member %s is running (pid %d)", name, p.PID)
	}
	if err := l.runEtcdMember(m); err != nil {
		return err
	}
	return l.waitEtcdHealthy(ctx, m, 30*time.Second)
}

// waitEtcdHealthy polls a member's /health.
func (l *Lab) waitEtcdHealthy(ctx context.Context, m etcdMember, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := l.EtcdHealthy(ctx, m.Name)
		if err == nil {
			return nil
		}
		p, _ := l.Proc(m.Name)
		if !p.Alive() || time.Now().After(deadline) {
			return fmt.Errorf("etcd member %s did not become healthy: %v\n%s", m.Name, err, tail(p.Log, 2000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// etcdGet asks a member's plain metrics listener (127.0.0.1:2381 in its
// namespace) for path.
func (l *Lab) etcdGet(ctx context.Context, name, path string) (string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNS(l.st.Prefix+name, func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:2381"+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	if resp.StatusCode != http.StatusOK {
		return b.String(), fmt.Errorf("etcd member %s %s: %s", name, path, resp.Status)
	}
	return b.String(), sc.Err()
}

// EtcdHealthy asks a member's /health.
func (l *Lab) EtcdHealthy(ctx context.Context, name string) error {
	body, err := l.etcdGet(ctx, name, "/health")
	if err != nil {
		return err
	}
	if !strings.Contains(body, `"health":"true"`) {
		return fmt.Errorf("etcd member %s: %s", name, strings.TrimSpace(body))
	}
	return nil
}

// EtcdLeader names the member that is the raft leader now.
func (l *Lab) EtcdLeader(ctx context.Context) (string, error) {
	var errs []error
	for _, m := range l.etcdMembers() {
		body, err := l.etcdGet(ctx, m.Name, "/metrics")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, line := range strings.Split(body, "\n") {
			if strings.TrimSpace(line) == "etcd_server_is_leader 1" {
				return m.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no etcd member says it is the leader: %w", errors.Join(errs...))
}
