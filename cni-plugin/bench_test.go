package cniplugin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// BenchmarkAddDel measures ADD+DEL through libcni of calico + calico-ipam
// against the reference bridge + host-local, interleaved in the same run on
// the same node, and reports p50/p99 of both and the ratio ("x/ref").
func BenchmarkAddDel(b *testing.B) {
	c := newCluster(b)
	c.addPool("pool-a", "10.73.0.0/16", 26)
	n := c.newNode("node1")
	ours := n.calicoConf("1.0.0", nil)
	ours = confWith(b, ours, "log_level", "warning")
	ref := confList(b, "1.0.0", "ref-network", []map[string]any{{
		"type": "bridge", "bridge": "plref0", "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(c.dir, "host-local"),
			"ranges": [][]map[string]string{{{"subnet": "10.74.0.0/16"}}}},
	}})
	// One pod namespace for each, reused: namespace creation is not what
	// is measured.
	pOurs, pRef := n.newPod("bench", "ours"), n.newPod("bench", "ref")
	cycle := func(list *libcni.NetworkConfigList, p *pod) time.Duration {
		start := time.Now()
		if _, err := n.add(list, p.runtimeConf(true)); err != nil {
			b.Fatalf("ADD %s: %v", list.Name, err)
		}
		if err := n.del(list, p.runtimeConf(true)); err != nil {
			b.Fatalf("DEL %s: %v", list.Name, err)
		}
		return time.Since(start)
	}
	cycle(ours, pOurs) // warm caches, claim the block
	cycle(ref, pRef)
	var tOurs, tRef []time.Duration
	deadline := time.Now().Add(20 * time.Second)
	b.ResetTimer()
	for i := 0; i < b.N || (len(tOurs) < 20 && time.Now().Before(deadline)); i++ {
		tOurs = append(tOurs, cycle(ours, pOurs))
		tRef = append(tRef, cycle(ref, pRef))
		if time.Now().After(deadline) {
			break
		}
	}
	b.StopTimer()
	p50o, p99o := percentiles(tOurs)
	p50r, p99r := percentiles(tRef)
	b.ReportMetric(float64(p50o.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99o.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(p50r.Microseconds())/1000, "ref-p50-ms")
	b.ReportMetric(float64(p99r.Microseconds())/1000, "ref-p99-ms")
	b.ReportMetric(float64(p50o)/float64(p50r), "x/ref")
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[(len(s)*99)/100]
}

// BenchmarkCalicoIPAMSequential execs calico-ipam ADD 200 times one after
// the other against etcd, each for a new container, and reports
// allocations per second (the DELs that clean up are not timed).
func BenchmarkCalicoIPAMSequential(b *testing.B) {
	c := newCluster(b)
	c.addPool("pool-a", "10.75.0.0/16", 26)
	conf := []byte(`{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"calico-ipam","log_level":"warning",` +
		`"nodename":"node1","etcd_endpoints":"` + c.endpoints[0] + `","ipam":{"type":"calico-ipam"}}`)
	exe := filepath.Join(binDir, "calico-ipam")
	run := func(command, id string) {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+id, "CNI_NETNS=/proc/self/ns/net",
			"CNI_IFNAME=eth0", "CNI_PATH="+binDir, "CNI_NETNS_OVERRIDE=1")
		cmd.Stdin = bytesReader(conf)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("calico-ipam %s %s: %v: %s", command, id, err, out)
		}
	}
	const execs = 200
	b.ResetTimer()
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for j := range execs {
			run("ADD", "bench"+itoa(i*execs+j))
		}
		elapsed += time.Since(start)
		b.StopTimer()
		for j := range execs {
			run("DEL", "bench"+itoa(i*execs+j))
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(execs*b.N)/elapsed.Seconds(), "allocs/s")
}

// BenchmarkVersion execs `calico` with CNI_COMMAND=VERSION, against the
// reference bridge plugin doing the same.
func BenchmarkVersion(b *testing.B) {
	if binDir == "" {
		b.Skip("no binaries")
	}
	exec1 := func(path string) time.Duration {
		cmd := exec.Command(path)
		cmd.Env = append(os.Environ(), "CNI_COMMAND=VERSION")
		cmd.Stdin = bytesReader([]byte(`{"cniVersion":"1.0.0"}`))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s VERSION: %v: %s", path, err, out)
		}
		return time.Since(start)
	}
	var ours, ref []time.Duration
	for i := 0; i < b.N || len(ours) < 50; i++ {
		ours = append(ours, exec1(filepath.Join(binDir, "calico")))
		ref = append(ref, exec1(filepath.Join(refPluginDir, "bridge")))
	}
	p50o, _ := percentiles(ours)
	p50r, _ := percentiles(ref)
	b.ReportMetric(float64(p50o.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p50r.Microseconds())/1000, "ref-p50-ms")
	b.ReportMetric(float64(p50o)/float64(p50r), "x/ref")
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func itoa(i int) string { return strconv.Itoa(i) }

// BenchmarkAddDelKubernetes is BenchmarkAddDel with the calico plugin in
// Kubernetes mode (a real API server, policy type k8s): each ADD reads the
// pod and its namespace and annotates the pod, each DEL removes the
// annotations. The reference is bridge + host-local in the same run.
func BenchmarkAddDelKubernetes(b *testing.B) {
	c := newCluster(b)
	c.addPool("pool-a", "10.76.0.0/16", 26)
	n := c.newKubeNode(b, "node1")
	ours := confWith(b, n.kubeConf(b, nil, nil), "log_level", "warning")
	ref := confList(b, "1.0.0", "ref-network", []map[string]any{{
		"type": "bridge", "bridge": "plref1", "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(c.dir, "host-local"),
			"ranges": [][]map[string]string{{{"subnet": "10.77.0.0/16"}}}},
	}})
	pOurs, pRef := n.newPod("default", "bench-ours"), n.newPod("bench", "ref")
	kubePod(b, n.kc, pOurs, "node1", "", map[string]string{"app": "bench"}, nil)
	cycle := func(list *libcni.NetworkConfigList, p *pod) time.Duration {
		start := time.Now()
		if _, err := n.add(list, p.runtimeConf(true)); err != nil {
			b.Fatalf("ADD %s: %v", list.Name, err)
		}
		if err := n.del(list, p.runtimeConf(true)); err != nil {
			b.Fatalf("DEL %s: %v", list.Name, err)
		}
		return time.Since(start)
	}
	cycle(ours, pOurs)
	cycle(ref, pRef)
	var tOurs, tRef []time.Duration
	deadline := time.Now().Add(20 * time.Second)
	b.ResetTimer()
	for i := 0; i < b.N || (len(tOurs) < 20 && time.Now().Before(deadline)); i++ {
		tOurs = append(tOurs, cycle(ours, pOurs))
		tRef = append(tRef, cycle(ref, pRef))
		if time.Now().After(deadline) {
			break
		}
	}
	b.StopTimer()
	p50o, p99o := percentiles(tOurs)
	p50r, p99r := percentiles(tRef)
	b.ReportMetric(float64(p50o.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99o.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(p50r.Microseconds())/1000, "ref-p50-ms")
	b.ReportMetric(float64(p99r.Microseconds())/1000, "ref-p99-ms")
	b.ReportMetric(float64(p50o)/float64(p50r), "x/ref")
}
