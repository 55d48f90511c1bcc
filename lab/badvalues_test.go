package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-net/palisade/libcalico/apiconfig"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
)

// putRawEnv makes the test binary the helper that writes raw values.
const putRawEnv = "PALISADE_LAB_PUT_RAW"

// badLabValues are values written straight into the lab's etcd under
// keys of kinds every reader reads, none the resource its key names.
var badLabValues = map[string]string{
	"globalnetworkpolicies/pool-in-disguise": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"pool-in-disguise"},"spec":{"cidr":"10.8.0.0/16"}}`,
	"networkpolicies/late/broken":            `{"kind":"NetworkPolicy",`,
	"workloadendpoints/late/broken":          `[]`,
	"ippools/bad-cidr":                       `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"bad-cidr"},"spec":{"cidr":"10.1.0.0/99"}}`,
	"ippools/broken":                         `{"kind":`,
	"nodes/ghost":                            `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"someone"}}`,
	"bgppeers/broken":                        `null`,
	"profiles/broken":                        `{"kind":"Profile","spec":7}`,
	"hostendpoints/broken":                   `{`,
	"tiers/broken":                           `{`,
	"felixconfigurations/node.ghost":         `{`,
	"ipamconfigurations/default":             `{`,
}

// TestAgentRestartsOverBadValues: with bad values under every kind the
// agents read, a calico-node killed on node2 comes back and gets in sync:
// a new pod on node2 gets an address (the bad pools ignored) and is
// reachable from node1, and a policy written after the restart is
// enforced on node2.
func TestAgentRestartsOverBadValues(t *testing.T) {
	// A BIRD route reflector, as TestKillAgent: sessions of a mesh come
	// back late after a restart (a BGP matter of its own).
	l := newLab(t, Options{Nodes: 2, RR: RRBird2})
	ctx := context.Background()
	if _, err := l.AddPod(ctx, "node1", "bad", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddPod(ctx, "node2", "bad", "b"); err != nil {
		t.Fatal(err)
	}
	requireReachable(t, l, "before the bad values")

	values, _ := json.Marshal(badLabValues)
	cmd, err := l.Command(ctx, "node1", os.Args[0], "-test.run=^TestHelperPutRaw$", "-test.count=1")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, putRawEnv+"=1", "PALISADE_BIN="+binDir)
	var out bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(values), &out, &out
	if err := l.StartIn("node1", cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("writing the bad values: %v\n%s", err, out.String())
	}

	oldPID, err := l.AgentPID("node2")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 calico-node (pid %d): %v", oldPID, err)
	}
	waitFor(t, 30*time.Second, "calico-node restarted on node2", func() (bool, string) {
		pid, err := l.AgentPID("node2")
		return err == nil && pid != oldPID, "still the killed agent or none"
	})
	if _, err := l.WaitSessions(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	var c Pod
	waitFor(t, 30*time.Second, "a new pod on node2 networked beside bad pools", func() (bool, string) {
		p, err := l.AddPod(ctx, "node2", "late", "c")
		if err != nil {
			return false, err.Error()
		}
		c = p
		return true, ""
	})
	requireReachable(t, l, "after the restart over bad values")

	// A policy written now denies c's ingress: node2's felix, restarted
	// over the bad values, must be in sync to enforce it.
	if err := l.Apply(ctx, `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: deny-ingress, namespace: late}
spec:
  selector: all()
  types: [Ingress]
`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the new policy enforced on node2", func() (bool, string) {
		_, err := l.Ping(ctx, "bad/a", c.IP, 500*time.Millisecond)
		return err != nil, "bad/a still reaches late/c"
	})
	if _, err := l.Ping(ctx, "late/c", mustPod(t, l, "bad", "a").IP, 2*time.Second); err != nil {
		t.Errorf("late/c cannot reach bad/a (egress is not denied): %v", err)
	}
}

// mustPod returns a pod of the lab.
func mustPod(t *testing.T, l *Lab, namespace, name string) Pod {
	t.Helper()
	for _, p := range l.Pods() {
		if p.Namespace == namespace && p.Name == name {
			return p
		}
	}
	t.Fatalf("no pod %s/%s", namespace, name)
	return Pod{}
}

// TestHelperPutRaw writes the key → value map on its standard input
// under the resource prefix of the datastore its environment names (as
// calicoctl's); it does nothing in a normal test run.
func TestHelperPutRaw(t *testing.T) {
	if os.Getenv(putRawEnv) != "1" {
		t.Skip("helper process for TestAgentRestartsOverBadValues")
	}
	var values map[string]string
	if err := json.NewDecoder(os.Stdin).Decode(&values); err != nil {
		t.Fatal(err)
	}
	cfg, err := apiconfig.Load(apiconfig.DefaultPath, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := etcdv3.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for k, v := range values {
		if _, err := s.Client().Put(ctx, datastore.ResourcePrefix+k, v); err != nil {
			t.Fatal(fmt.Errorf("putting %s: %w", k, err))
		}
	}
}
