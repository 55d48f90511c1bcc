package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestManifestImages: every container of manifests/calico-etcd.yaml runs
// an image this command builds, and the programs it starts (command and
// exec probes) are files of that image.
func TestManifestImages(t *testing.T) {
	raw, err := os.ReadFile("../../manifests/calico-etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]string{}
	for _, s := range Specs("bin", nil, "latest", "", time.Time{}) {
		for _, f := range s.Files {
			files[s.Name+":"+s.Tag] = append(files[s.Name+":"+s.Tag], f.Dst)
		}
		files[s.Name+":"+s.Tag] = append(files[s.Name+":"+s.Tag], s.Entrypoint...)
	}
	checked := 0
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		var spec corev1.PodSpec
		switch meta.Kind {
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
			spec = ds.Spec.Template.Spec
		case "Deployment":
			var d appsv1.Deployment
			if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
				t.Fatal(err)
			}
			spec = d.Spec.Template.Spec
		default:
			continue
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			have, ok := files[c.Image]
			if !ok {
				t.Errorf("%s runs %s, which make images does not build", c.Name, c.Image)
				continue
			}
			var progs []string
			if len(c.Command) > 0 {
				progs = append(progs, c.Command[0])
			}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
				if p != nil && p.Exec != nil {
					progs = append(progs, p.Exec.Command[0])
				}
			}
			for _, p := range progs {
				if !contains(have, p) {
					t.Errorf("%s starts %s, which %s does not have", c.Name, p, c.Image)
				}
			}
			checked++
		}
	}
	if checked != 3 {
		t.Errorf("checked %d containers, want install-cni, calico-node and calico-kube-controllers", checked)
	}
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }
