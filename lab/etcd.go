package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// etcdBin is Debian's etcd (etcd-server).
const etcdBin = "/usr/bin/etcd"

// startEtcd runs a real etcd in its own namespace on the fabric.
func (l *Lab) startEtcd(ctx context.Context) error {
	l.say("creating external etcd: namespace %setcd, %s/24, %s", l.st.Prefix, etcdAddr, etcdBin)
	ns, err := l.attachNS(ctx, "etcd", "etcd", etcdAddr)
	if err != nil {
		return err
	}
	client := "http://" + netip.AddrPortFrom(etcdAddr, 2379).String()
	argv := []string{etcdBin, "--name", "lab", "--data-dir", l.path("etcd", "data"),
		"--listen-client-urls", client + ",http://127.0.0.1:2379", "--advertise-client-urls", client,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "lab=http://127.0.0.1:2380", "--initial-cluster-state", "new",
		"--heartbeat-interval", "20", "--election-timeout", "200", "--log-level", "warn"}
	p, err := start(ns, "etcd", l.path("etcd", "etcd.log"), argv, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		return err
	}
	if err := l.recordProc("etcd", p); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := l.etcdHealthy(ctx); err == nil {
			l.say("✓ etcd serves %s", client)
			return nil
		} else if !p.Alive() || time.Now().After(deadline) {
			return fmt.Errorf("etcd did not become healthy: %v\n%s", err, tail(p.Log, 2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// etcdHealthy asks the external etcd's /health from inside its namespace.
func (l *Lab) etcdHealthy(ctx context.Context) error {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNS(l.st.Prefix+"etcd", func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:2379/health", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd /health: %s", resp.Status)
	}
	return nil
}
