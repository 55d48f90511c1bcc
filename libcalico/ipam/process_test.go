package ipam

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// Environment of the helper process TestConcurrentProcesses starts.
const (
	helperEndpoint = "IPAM_TEST_HELPER_ENDPOINT"
	helperNode     = "IPAM_TEST_HELPER_NODE"
)

// TestConcurrentProcesses runs four allocator processes (this test binary
// re-executed), two per node, each assigning 20 addresses at once against
// the same etcd: no address may be handed out twice.
func TestConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	e := newEnv(t)
	e.pool("p", "10.0.0.0/24", func(s *v3.IPPoolSpec) { s.BlockSize = 28 })
	const procs, perProc = 4, 20
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAllocatorProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEndpoint+"="+e.endpoints[0], fmt.Sprintf("%s=node-%d", helperNode, i%2))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			outs[i], errs[i] = cmd.Output()
			if errs[i] != nil {
				// The helper's test failures are on its standard output.
				errs[i] = fmt.Errorf("%w: %s", errs[i], outs[i])
			}
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("process %d: %v", i, errs[i])
		}
		n := 0
		sc := bufio.NewScanner(bytes.NewReader(outs[i]))
		for sc.Scan() {
			ip, ok := strings.CutPrefix(sc.Text(), "ASSIGNED ")
			if !ok {
				continue
			}
			a := netip.MustParseAddr(ip)
			if j, dup := seen[a]; dup {
				t.Errorf("%s handed to processes %d and %d", a, j, i)
			}
			seen[a] = i
			n++
		}
		if n != perProc {
			t.Errorf("process %d reported %d addresses, want %d:\n%s", i, n, perProc, outs[i])
		}
	}
	e.checkInvariants()
}

// TestHelperAllocatorProcess is the body of one process of
// TestConcurrentProcesses; it does nothing in a normal test run.
func TestHelperAllocatorProcess(t *testing.T) {
	ep, node := os.Getenv(helperEndpoint), os.Getenv(helperNode)
	if ep == "" {
		t.Skip("helper process for TestConcurrentProcesses")
	}
	s, err := etcdv3.New(context.Background(), etcdv3.Config{Endpoints: []string{ep}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := New(s, s.KV())
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v4, _, err := a.AutoAssign(context.Background(), AutoAssignArgs{
				Num4: 1, Hostname: node, HandleID: fmt.Sprintf("%s-%d-%d", node, os.Getpid(), i),
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("assign %d: %v", i, err)
				return
			}
			fmt.Printf("ASSIGNED %s\n", v4.IPs[0].Addr())
		}()
	}
	wg.Wait()
}
