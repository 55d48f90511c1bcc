package kubecontrollers

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/k8s"
	"github.com/palisade-net/palisade/libcalico/names"
)

// Sizes of the first-sync benchmark.
const (
	benchNamespaces = 1000
	benchPolicies   = 10000
	benchPods       = 20000
)

// BenchmarkFirstSync measures calico-kube-controllers' first sync of a
// large cluster: 1,000 namespaces, 10,000 NetworkPolicies and 20,000 pods
// in the API server, the pods' WorkloadEndpoints already in etcd (as the
// CNI plugin wrote them) and nothing else. The binary runs as its own
// process; the time is from its start to its readiness (every
// controller synced), the memory its peak RSS (VmHWM). The reference,
// measured in the same run, is the work no implementation avoids: listing
// the same objects from the API server with client-go (protobuf) and
// writing the same number of Calico resources into the same etcd in
// transactions of 100. Goals: ≤ 10 s and ≤ 250 MB.
func BenchmarkFirstSync(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()
	bin := binary(b)
	prefix := "fs" + uniq() + "-"
	populate(b, c.Config, prefix)
	for i := 0; i < b.N; i++ {
		etcd, s := calicoStore(b)
		writeEndpoints(b, s, c.Client, prefix)
		port := freePort(b)
		env := append(os.Environ(), "DATASTORE_TYPE=etcdv3", "ETCD_ENDPOINTS="+etcd[0], "KUBECONFIG="+c.Kubeconfig,
			"HEALTH_PORT="+strconv.Itoa(port), "LEASE_NAME=kcc-"+uniq(), "LOG_LEVEL=warning")
		cmd := exec.Command(bin)
		cmd.Env = env
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		began := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/readiness", port)
		var took time.Duration
		for {
			if resp, err := http.Get(url); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					took = time.Since(began)
					break
				}
			}
			if time.Since(began) > 5*time.Minute {
				_ = cmd.Process.Kill()
				b.Fatalf("not ready after 5 minutes:\n%s", out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		rss := peakRSS(b, cmd.Process.Pid)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		items, _, err := s.List(ctx, datastore.ListOptions{Kind: v3.KindNetworkPolicy})
		if err != nil || len(items) < benchPolicies {
			b.Fatalf("after the first sync etcd holds %d policies (%v)", len(items), err)
		}
		ref := reference(b, c.Config, etcd)
		b.ReportMetric(took.Seconds(), "sync-s")
		b.ReportMetric(float64(rss)/(1<<20), "peak-rss-MB")
		b.ReportMetric(ref.Seconds(), "ref-s")
		b.ReportMetric(took.Seconds()/ref.Seconds(), "x/ref")
		b.ReportMetric(took.Seconds()/10, "s/goal")
		b.ReportMetric(float64(rss)/(250<<20), "MB/goal")
	}
}

// populate creates the namespaces, policies and pods (in parallel).
func populate(b testing.TB, rc *rest.Config, prefix string) {
	b.Helper()
	ctx := context.Background()
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 5000, 5000
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	parallel(b, benchNamespaces, func(i int) error {
		_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%d", prefix, i),
			Labels: map[string]string{"team": fmt.Sprintf("t%d", i%10)}}}, metav1.CreateOptions{})
		return err
	})
	parallel(b, benchPolicies, func(i int) error {
		ns := fmt.Sprintf("%s%d", prefix, i%benchNamespaces)
		np := netpol(ns, fmt.Sprintf("np-%d", i), int32(80+i%100), map[string]string{"app": fmt.Sprintf("a%d", i%7)})
		np.Spec.Ingress[0].From = append(np.Spec.Ingress[0].From, networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", i%10)}}})
		_, err := kc.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
		return err
	})
	// Pods need their namespace's default service account.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sas, err := kc.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{})
		n := 0
		if err == nil {
			for _, sa := range sas.Items {
				if strings.HasPrefix(sa.Namespace, prefix) && sa.Name == "default" {
					n++
				}
			}
		}
		if n == benchNamespaces {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d default service accounts after 2 minutes", n, benchNamespaces)
		}
		time.Sleep(200 * time.Millisecond)
	}
	parallel(b, benchPods, func(i int) error {
		ns := fmt.Sprintf("%s%d", prefix, i%benchNamespaces)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: ns,
			Labels: map[string]string{"app": fmt.Sprintf("a%d", i%7), "rev": strconv.Itoa(i % 3)}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node%d", i%50), AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "c", Image: "none", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}}}
		_, err := kc.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	b.Logf("created %d namespaces, %d NetworkPolicies and %d pods in %s", benchNamespaces, benchPolicies, benchPods, time.Since(began).Round(time.Second))
}

// parallel runs fn for 0..n-1 on 32 workers, failing on the first error.
func parallel(b testing.TB, n int, fn func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// writeEndpoints writes, in transactions of 100, the WorkloadEndpoint
// the CNI plugin would have written for every pod of the benchmark.
func writeEndpoints(b testing.TB, s datastore.Interface, kc kubernetes.Interface, prefix string) {
	b.Helper()
	ctx := context.Background()
	pods, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var batch []datastore.BatchWrite
	flush := func() {
		if _, err := s.WriteBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if !strings.HasPrefix(p.Namespace, prefix) {
			continue
		}
		ip := fmt.Sprintf("10.%d.%d.%d/32", 100+n/65536, (n/256)%256, n%256)
		w := &v3.WorkloadEndpoint{TypeMeta: v3.TypeMeta{Kind: v3.KindWorkloadEndpoint, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: names.WorkloadEndpointName(p.Spec.NodeName, "k8s", p.Name, "eth0"), Namespace: p.Namespace, Labels: k8s.PodLabels(p)},
			Spec: v3.WorkloadEndpointSpec{Orchestrator: "k8s", Node: p.Spec.NodeName, Pod: p.Name, Endpoint: "eth0",
				ContainerID: fmt.Sprintf("%064d", n), InterfaceName: fmt.Sprintf("cali%011d", n), Profiles: k8s.PodProfiles(p),
				Ports: k8s.PodPorts(p), ServiceAccountName: p.Spec.ServiceAccountName, IPNetworks: []string{ip}}}
		v3.Default(w)
		batch = append(batch, datastore.BatchWrite{Resource: w, Create: true})
		n++
		if len(batch) == 100 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	if n != benchPods {
		b.Fatalf("wrote %d endpoints, want %d", n, benchPods)
	}
}

// reference lists what the controllers list and writes as many
// resources as they write, the straight way.
func reference(b *testing.B, rc *rest.Config, _ []string) time.Duration {
	b.Helper()
	ctx := context.Background()
	rc = rest.CopyConfig(rc)
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	_, s := calicoStore(b)
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	wg.Go(func() { _, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); errs <- err })
	wg.Go(func() { _, err := kc.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{}); errs <- err })
	wg.Go(func() { _, err := kc.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); errs <- err })
	wg.Go(func() { _, err := kc.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{}); errs <- err })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	total := benchPolicies + 2*benchNamespaces
	var batch []datastore.BatchWrite
	for i := range total {
		order := 1000.0
		p := &v3.NetworkPolicy{TypeMeta: v3.TypeMeta{Kind: v3.KindNetworkPolicy, APIVersion: v3.APIVersion},
			ObjectMeta: v3.ObjectMeta{Name: fmt.Sprintf("ref-%d", i), Namespace: fmt.Sprintf("ns-%d", i%benchNamespaces)},
			Spec: v3.NetworkPolicySpec{Order: &order, Selector: "app == 'a'", Ingress: []v3.Rule{{Action: v3.Allow,
				Source: v3.EntityRule{Selector: "projectcalico.org/orchestrator == 'k8s' && app == 'b'", NamespaceSelector: "team == 't1'"}}}}}
		v3.Default(p)
		batch = append(batch, datastore.BatchWrite{Resource: p, Create: true})
		if len(batch) == 100 || i == total-1 {
			if _, err := s.WriteBatch(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return time.Since(began)
}

// peakRSS is a process's peak resident set (VmHWM).
func peakRSS(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmHWM")
	return 0
}
