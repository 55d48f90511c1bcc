package commands_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under calicoctl/testdata")

// nodeBinDir holds a calico-node built for the tests, if one was.
var nodeBinDir string

// binary is the calicoctl under test: $PALISADE_BIN/calicoctl, or one
// built by TestMain.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	code, err := buildAndRun(m)
	if nodeBinDir != "" {
		os.RemoveAll(nodeBinDir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(code)
}

func buildAndRun(m *testing.M) (int, error) {
	if dir := os.Getenv("PALISADE_BIN"); dir != "" {
		binary = filepath.Join(dir, "calicoctl")
		return m.Run(), nil
	}
	dir, err := os.MkdirTemp("", "calicoctl-test-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "calicoctl")
	out, err := exec.Command("go", "build", "-o", binary, "../cmd/calicoctl").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("building calicoctl: %v\n%s", err, out)
	}
	return m.Run(), nil
}

// cluster is one embedded etcd with a raw client to look at it directly.
type cluster struct {
	endpoints []string
	raw       *clientv3.Client
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	eps := etcdtest.Start(t)
	raw, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("raw etcd client: %v", err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	return &cluster{endpoints: eps, raw: raw}
}

// result is what one calicoctl run printed and returned.
type result struct {
	stdout, stderr string
	code           int
}

// run executes calicoctl with ETCD_ENDPOINTS pointing at the cluster
// (extra environment entries override), feeding stdin.
func (c *cluster) run(t testing.TB, stdin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"ETCD_ENDPOINTS=" + strings.Join(c.endpoints, ","),
	}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running calicoctl %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// mustRun runs calicoctl and fails the test unless it exits 0.
func (c *cluster) mustRun(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	r := c.run(t, stdin, nil, args...)
	if r.code != 0 {
		t.Fatalf("calicoctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// dump returns every resource key and value in the datastore, to compare
// before and after a command that must write nothing.
func (c *cluster) dump(t testing.TB) map[string]string {
	t.Helper()
	resp, err := c.raw.Get(context.Background(), datastore.ResourcePrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading etcd: %v", err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

var masks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(resourceVersion"?: )"[0-9]+"`), `$1"<rv>"`},
	{regexp.MustCompile(`(uid"?: )"?[0-9a-f-]{36}"?`), `$1"<uid>"`},
	{regexp.MustCompile(`(creationTimestamp"?: )"[0-9TZ:-]+"`), `$1"<time>"`},
	{regexp.MustCompile(`(Go version:\s+)\S+`), `${1}<go>`},
	{regexp.MustCompile(`(Client Version:\s+)\S+`), `${1}<version>`},
	{regexp.MustCompile(`(Git commit:\s+)\S+`), `${1}<commit>`},
	{regexp.MustCompile(`(Build date:\s+)\S+`), `${1}<date>`},
}

// mask replaces what changes from run to run (revisions, uids, times,
// build stamps) with placeholders.
func mask(s string) string {
	for _, m := range masks {
		s = m.re.ReplaceAllString(s, m.with)
	}
	return s
}

// golden compares got with testdata/golden/<name>, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("..", "testdata", "golden", name)
	got = mask(got)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (run with -update to accept):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// writeFile writes a test input file and returns its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
