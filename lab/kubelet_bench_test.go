package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Benchmarks of real nodes: how fast a Deployment's pods become Ready
// and reachable with Palisade, against the reference plugins (bridge,
// host-local) on the same kind of lab in the same run, and calico-node's
// memory as the DaemonSet runs it.

// readyReplicas is the Deployment size BenchmarkDeploymentReady measures.
const readyReplicas = 30

// deploymentReady applies a Deployment of readyReplicas agnhost servers
// and returns, per pod, the time from the apply until this process saw it
// Ready, and the time until every pod also answered from every node; it
// deletes the Deployment and waits for its pods to go before returning.
func deploymentReady(b *testing.B, l *Lab, name string) (ready []time.Duration, reachable time.Duration) {
	b.Helper()
	ctx := context.Background()
	kc, err := l.Kube()
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	if _, err := l.KubectlOutput(ctx, deployment(name, readyReplicas), "apply", "-f", "-"); err != nil {
		b.Fatal(err)
	}
	// Polled every 50 ms: a pod's Ready time is known to that much.
	seen := map[string]bool{}
	pods := map[string]corev1.Pod{}
	for len(seen) < readyReplicas {
		if time.Since(began) > 5*time.Minute {
			b.Fatalf("%d of %d pods Ready after 5 minutes", len(seen), readyReplicas)
		}
		list, err := kc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range list.Items {
			if seen[p.Name] {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					seen[p.Name] = true
					pods[p.Name] = p
					ready = append(ready, time.Since(began))
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, n := range l.Nodes() {
		for _, p := range pods {
			addr := netip.AddrPortFrom(netip.MustParseAddr(p.Status.PodIP), 8080)
			for {
				got, err := hostname(ctx, nsPath(n.NS), addr)
				if err == nil && got == p.Name {
					break
				}
				if time.Since(began) > 6*time.Minute {
					b.Fatalf("from %s, pod %s (%s): %q, %v", n.Name, p.Name, addr, got, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	reachable = time.Since(began)
	if _, err := l.KubectlOutput(ctx, "", "delete", "deploy", name, "--wait=true"); err != nil {
		b.Fatal(err)
	}
	for {
		list, err := kc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err == nil && len(list.Items) == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i] < ready[j] })
	return ready, reachable
}

// quantile of sorted durations.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d)-1) + 0.5)
	return d[i]
}

// BenchmarkDeploymentReady: a Deployment of 30 replicas, from apply until
// every pod is Ready and reachable from every node, on three real nodes
// with Palisade against three with bridge + host-local (same kubelet,
// same containerd), one lab after the other in the same run.
func BenchmarkDeploymentReady(b *testing.B) {
	requireRealNodes(b)
	var pal, ref []time.Duration
	var palAll, refAll []time.Duration
	for _, side := range []struct {
		name string
		o    Options
		out  *[]time.Duration
		all  *[]time.Duration
	}{
		{"palisade", Options{Name: "bp", Nodes: 3, Kubelet: true}, &pal, &palAll},
		{"reference", Options{Name: "br", Nodes: 3, Kubelet: true, ReferenceCNI: true}, &ref, &refAll},
	} {
		l := newLabTimeout(b, side.o, 5*time.Minute)
		// One warm-up Deployment: the images' first unpack and the first
		// block of each node are not what is measured.
		deploymentReady(b, l, "warm")
		for i := 0; i < b.N; i++ {
			r, all := deploymentReady(b, l, "web"+strconv.Itoa(i))
			*side.out = append(*side.out, r...)
			*side.all = append(*side.all, all)
		}
		if err := l.Down(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	sort.Slice(pal, func(i, j int) bool { return pal[i] < pal[j] })
	sort.Slice(ref, func(i, j int) bool { return ref[i] < ref[j] })
	sec := func(d time.Duration) float64 { return d.Seconds() }
	b.ReportMetric(sec(quantile(pal, 0.5)), "p50-s")
	b.ReportMetric(sec(quantile(pal, 0.99)), "p99-s")
	b.ReportMetric(sec(quantile(ref, 0.5)), "ref-p50-s")
	b.ReportMetric(sec(quantile(ref, 0.99)), "ref-p99-s")
	b.ReportMetric(sec(maxDuration(palAll)), "reachable-s")
	b.ReportMetric(sec(maxDuration(refAll)), "ref-reachable-s")
	b.ReportMetric(float64(quantile(pal, 0.5))/float64(quantile(ref, 0.5)), "p50-x/ref")
	b.ReportMetric(float64(quantile(pal, 0.99))/float64(quantile(ref, 0.99)), "x/ref")
}

func maxDuration(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

// BenchmarkCalicoNodeRSS: the resident memory of calico-node as the
// DaemonSet runs it on a real node with 30 pods, against the goal of
// 60 MB.
func BenchmarkCalicoNodeRSS(b *testing.B) {
	requireRealNodes(b)
	l := newLabTimeout(b, Options{Name: "bm", Nodes: 1, Kubelet: true}, 5*time.Minute)
	ctx := context.Background()
	if _, err := l.KubectlOutput(ctx, deployment("rss", 30), "apply", "-f", "-"); err != nil {
		b.Fatal(err)
	}
	if _, err := l.KubectlOutput(ctx, "", "rollout", "status", "deploy/rss", "--timeout=5m"); err != nil {
		b.Fatal(err)
	}
	var rss int64
	for i := 0; i < b.N; i++ {
		// Settled: felix and BGP have programmed all 30.
		time.Sleep(5 * time.Second)
		rss = 0
		for _, pid := range l.NodeProcesses("node1", "calico-node") {
			rss += vmRSS(b, pid)
		}
	}
	if rss == 0 {
		b.Fatal("no calico-node process on node1")
	}
	b.ReportMetric(float64(rss)/(1<<20), "rss-MB")
	b.ReportMetric(float64(rss)/(60<<20), "x/goal")
}

// vmRSS is a process's resident set size in bytes.
func vmRSS(b *testing.B, pid int) int64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
