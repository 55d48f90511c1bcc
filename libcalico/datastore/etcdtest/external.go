package etcdtest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// ExternalBinary is the system etcd (Debian's etcd-server package).
const ExternalBinary = "/usr/bin/etcd"

// StartExternal runs the system etcd binary as a separate process on free
// loopback ports, with its data and log in the test's temporary directory,
// and kills it when the test ends. The test is skipped when the binary is
// not installed.
func StartExternal(t testing.TB) []string {
	t.Helper()
	return startExternalRetrying(t, nil)
}

// StartExternalTLS runs the system etcd like StartExternal, serving https
// only and requiring a client certificate signed by the generated CA;
// files are in the test's temporary directory.
func StartExternalTLS(t testing.TB) ([]string, TLSFiles) {
	t.Helper()
	files := GenerateTLS(t, t.TempDir())
	return startExternalRetrying(t, &files), files
}

// startExternalRetrying starts the binary, with TLS when files is set.
func startExternalRetrying(t testing.TB, files *TLSFiles) []string {
	t.Helper()
	if _, err := os.Stat(ExternalBinary); err != nil {
		t.Skipf("external etcd: %s not installed (Debian package etcd-server): %v", ExternalBinary, err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a picked port may be taken meanwhile
		ep, err := startExternal(t, files)
		if err == nil {
			return []string{ep}
		}
		lastErr = err
	}
	t.Fatalf("external etcd: %v", lastErr)
	return nil
}

// startExternal makes one attempt at starting the binary.
func startExternal(t testing.TB, files *TLSFiles) (string, error) {
	dir := t.TempDir()
	clientPort, err := freePort()
	if err != nil {
		return "", err
	}
	peerPort, err := freePort()
	if err != nil {
		return "", err
	}
	scheme := "http"
	if files != nil {
		scheme = "https"
	}
	client := fmt.Sprintf("%s://127.0.0.1:%d", scheme, clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	logPath := filepath.Join(dir, "etcd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	args := []string{
		"--name", "test",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test=" + peer,
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
	}
	hc := &http.Client{Timeout: time.Second}
	if files != nil {
		args = append(args, "--cert-file", files.ServerCert, "--key-file", files.ServerKey,
			"--client-cert-auth", "--trusted-ca-file", files.CA)
		tc, err := files.clientTLS()
		if err != nil {
			return "", err
		}
		hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	cmd := exec.Command(ExternalBinary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("running %s: %w", ExternalBinary, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	if err := waitHealthy(hc, client, exited, &waitErr); err != nil {
		stop()
		tail, _ := os.ReadFile(logPath)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return "", fmt.Errorf("%s on %s: %w; log ends with:\n%s", ExternalBinary, client, err, bytes.TrimSpace(tail))
	}
	t.Cleanup(stop)
	return client, nil
}

// waitHealthy polls the member's /health until it reports healthy, the
// process exits, or 15 s pass.
func waitHealthy(hc *http.Client, client string, exited <-chan struct{}, waitErr *error) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("exited early: %v", *waitErr)
		default:
		}
		resp, err := hc.Get(client + "/health")
		if err == nil {
			body := new(bytes.Buffer)
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body.Bytes(), []byte(`"health":"true"`)) {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not healthy within 15s")
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
