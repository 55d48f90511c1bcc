package lab

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/palisade-net/palisade/libcalico/k8s/kubetest"
)

// TestCLI drives the lab binary as a user would, each command its own
// process: up, pod add, exec calicoctl, ping, status, pod del, down; down
// leaves no namespace, process or state behind.
func TestCLI(t *testing.T) {
	requireLab(t)
	bin := filepath.Join(binDir, "lab")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s not built (make build)", bin)
	}
	name, root, lab := labCLI(t, bin, "tcli")
	out := lab(true, "up", "--nodes", "2", "--rr", "bird2", "--border")
	for _, want := range []string{"Established", "lab " + name + " is up"} {
		if !strings.Contains(out, want) {
			t.Errorf("up: no %q in\n%s", want, out)
		}
	}
	lab(false, "up") // the same name twice
	// The hints up printed run as printed (the last one, down, at the end).
	var hints [][]string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  "+bin+" ") {
			cmd, _, _ := strings.Cut(strings.TrimSpace(line), "   ")
			hints = append(hints, strings.Fields(cmd))
		}
	}
	if len(hints) < 5 || !strings.Contains(strings.Join(hints[len(hints)-1], " "), " down ") {
		t.Fatalf("up printed %d hints, want at least 5 ending with down:\n%s", len(hints), out)
	}
	for _, h := range hints[:len(hints)-1] {
		if out, err := exec.Command(h[0], h[1:]...).CombinedOutput(); err != nil {
			t.Errorf("hint %q: %v\n%s", strings.Join(h, " "), err, out)
		} else if strings.Contains(strings.Join(h, " "), "birdc") && !strings.Contains(string(out), "Established") {
			t.Errorf("hint %q shows no established session:\n%s", strings.Join(h, " "), out)
		}
	}
	if out := lab(true, "version"); !strings.HasPrefix(out, "Version:") || !strings.Contains(out, "Git commit:") {
		t.Errorf("lab version: %q", out)
	}
	lab(true, "pod", "add", "node1", "default/web")
	lab(true, "pod", "add", "node2", "default/db")
	if out := lab(true, "exec", "node2", "--", "calicoctl", "get", "workloadendpoints", "-A"); !strings.Contains(out, "web") || !strings.Contains(out, "db") {
		t.Errorf("calicoctl get workloadendpoints in node2 lacks the pods:\n%s", out)
	}
	if out := lab(true, "ping", "default/web", "default/db"); !strings.Contains(out, "reply in") {
		t.Errorf("ping: %s", out)
	}
	lab(true, "ping", "border", "default/db")
	// A served, labelled pod, probed over each protocol.
	lab(true, "pod", "add", "node1", "default/srv", "--labels", "app=srv,tier=web", "--serve", "80/tcp,81/udp,80/sctp")
	if out := lab(true, "exec", "node1", "--", "calicoctl", "get", "workloadendpoints", "-n", "default", "-o", "yaml"); !strings.Contains(out, "app: srv") || !strings.Contains(out, "tier: web") {
		t.Errorf("the served pod's endpoint lacks its labels:\n%s", out)
	}
	for _, pr := range [][]string{{"80", "tcp"}, {"81", "udp"}, {"80", "sctp"}} {
		if out := lab(true, "probe", "default/db", "default/srv", "--port", pr[0], "--protocol", pr[1]); !strings.Contains(out, "answered") {
			t.Errorf("probe %s/%s: %s", pr[0], pr[1], out)
		}
	}
	if out, err := exec.Command(bin, "--name", name, "--state-dir", root, "probe", "default/db", "default/srv", "--port", "81", "--protocol", "tcp", "--timeout", "300ms").CombinedOutput(); cmdExit(err) != 1 {
		t.Errorf("a probe of a port nobody serves should exit 1: %v %s", err, out)
	}
	if out := lab(false, "pod", "add", "node1", "default/fixed", "--ip", "10.244.9.9"); !strings.Contains(out, "--kubernetes") {
		t.Errorf("--ip without Kubernetes: %s", out)
	}
	out = lab(true, "status")
	for _, want := range []string{"=== node1", "=== node2", "calicoctl node status", "Calico process is running", BorderPrefix().String() + " via", "=== rr", "=== border", "default/web"} {
		if !strings.Contains(out, want) {
			t.Errorf("status: no %q in\n%s", want, out)
		}
	}
	if out, err := exec.Command(bin, "--name", name, "--state-dir", root, "exec", "node1", "--", "sh", "-c", "exit 3").CombinedOutput(); err == nil || cmdExit(err) != 3 {
		t.Errorf("exec should pass exit status 3 through: %v %s", err, out)
	}
	lab(true, "pod", "del", "node1", "default/web")
	lab(false, "ping", "--timeout", "500ms", "node1", "default/web")
	down := hints[len(hints)-1]
	if out, err := exec.Command(down[0], down[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("hint %q: %v\n%s", strings.Join(down, " "), err, out)
	}
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pl-"+name+"-") {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(root, name)); err == nil {
		t.Errorf("state left behind in %s", filepath.Join(root, name))
	}
	if out, _ := exec.Command("pgrep", "-f", filepath.Join(root, name)).Output(); len(out) > 0 {
		t.Errorf("processes left behind: %s", out)
	}
}

func cmdExit(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// TestCLIStatefulSetPod drives `lab pod add --owner --annotations` against
// a lab with Kubernetes: the StatefulSet is made, the Pod carries the
// annotations, the set's labels and its controller ownerReference; a
// second ordinal scales the set up; the pod re-created on the other node
// (ipReleasePolicy immutable) prints the same address; a pod name that is
// not <set>-<ordinal> is refused with nothing made.
func TestCLIStatefulSetPod(t *testing.T) {
	requireLab(t)
	kubeBin := kubetest.Bin(t)
	bin := filepath.Join(binDir, "lab")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s not built (make build)", bin)
	}
	_, _, lab := labCLI(t, bin, "tstsc")
	lab(true, "up", "--nodes", "2", "--kubernetes", "--kube-bin-dir", kubeBin)
	const policy = "cni.projectcalico.org/ipReleasePolicy"
	addr := func(out string) string {
		f := strings.Fields(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
		if len(f) != 2 {
			t.Fatalf("pod add printed %q, want <pod> <address> last", out)
		}
		return f[1]
	}
	first := addr(lab(true, "pod", "add", "node1", "default/db-0", "--owner", "statefulset/db", "--labels", "tier=db",
		"--annotations", policy+"=immutable,example.com/note=a=b"))
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(lab(true, "kubectl", "--", "get", "pod", "-n", "default", "db-0", "-o", "json")), &pod); err != nil {
		t.Fatal(err)
	}
	var set appsv1.StatefulSet
	if err := json.Unmarshal([]byte(lab(true, "kubectl", "--", "get", "statefulset", "-n", "default", "db", "-o", "json")), &set); err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(&pod)
	if ref == nil || ref.Kind != "StatefulSet" || ref.APIVersion != "apps/v1" || ref.Name != "db" || ref.UID != set.UID ||
		ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("db-0's controller ownerReference %+v, want StatefulSet db (uid %s)", ref, set.UID)
	}
	if pod.Annotations[policy] != "immutable" || pod.Annotations["example.com/note"] != "a=b" {
		t.Errorf("db-0's annotations %v", pod.Annotations)
	}
	for k, v := range map[string]string{"tier": "db", statefulSetLabel: "db", appsv1.StatefulSetPodNameLabel: "db-0", appsv1.PodIndexLabel: "0"} {
		if pod.Labels[k] != v {
			t.Errorf("db-0's label %s = %q, want %q (labels %v)", k, pod.Labels[k], v, pod.Labels)
		}
	}
	if set.Spec.Replicas == nil || *set.Spec.Replicas != 1 {
		t.Errorf("StatefulSet db made with %v replicas, want 1", set.Spec.Replicas)
	}
	if pod.Status.PodIP != first {
		t.Errorf("db-0's podIP %q, lab printed %s", pod.Status.PodIP, first)
	}
	lab(true, "pod", "add", "node2", "default/db-2", "--owner", "sts/db", "--annotations", policy+"=immutable")
	if out := lab(true, "kubectl", "--", "get", "statefulset", "-n", "default", "db", "-o", "jsonpath={.spec.replicas}"); out != "3" {
		t.Errorf("after db-2, StatefulSet db has %q replicas, want 3", out)
	}
	lab(true, "pod", "del", "node1", "default/db-0")
	if again := addr(lab(true, "pod", "add", "node2", "default/db-0", "--owner", "statefulset/db", "--annotations", policy+"=immutable")); again != first {
		t.Errorf("db-0 re-created on node2 got %s, before %s", again, first)
	}
	if out := lab(false, "pod", "add", "node1", "default/web-0", "--owner", "statefulset/db"); !strings.Contains(out, "is named db-<ordinal>") {
		t.Errorf("a pod not named db-<ordinal>: %s", out)
	}
	if out := lab(false, "kubectl", "--", "get", "pod", "-n", "default", "web-0"); !strings.Contains(out, "NotFound") {
		t.Errorf("the refused pod was made: %s", out)
	}
	lab(true, "down")
}

// labCLI runs the lab binary bin for one lab of its own (a unique name
// starting with prefix, in its own state directory), failing the test
// when a command's success is not wantOK; the lab is taken down at the
// end when it is still there.
func labCLI(t *testing.T, bin, prefix string) (name, root string, lab func(wantOK bool, args ...string) string) {
	name, root = uniqueName(prefix), t.TempDir()
	lab = func(wantOK bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--name", name, "--state-dir", root, "--bin-dir", binDir}, args...)...)
		out, err := cmd.CombinedOutput()
		if (err == nil) != wantOK {
			t.Fatalf("lab %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(root, name)); err == nil {
			lab(true, "down")
		}
	})
	return name, root, lab
}
