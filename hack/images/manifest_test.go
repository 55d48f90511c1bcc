package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestManifestImages: every container of manifests/calico-etcd.yaml and
// manifests/coredns.yaml runs an image this command builds, and the
// programs it starts (command and exec probes) are files of that image.
func TestManifestImages(t *testing.T) {
	files := map[string][]string{}
	for _, tg := range Targets([]Inputs{{Arch: "amd64", Bin: "bin", Agnhost: "agnhost", CoreDNS: "coredns"}}, "latest", "", time.Time{}) {
		s := tg.Specs[0]
		for _, f := range s.Files {
			files[tg.Ref] = append(files[tg.Ref], f.Dst)
		}
		files[tg.Ref] = append(files[tg.Ref], s.Entrypoint...)
	}
	for _, c := range []struct {
		manifest string
		want     []string
	}{
		{"calico-etcd.yaml", []string{"install-cni", "calico-node", "calico-kube-controllers"}},
		{"coredns.yaml", []string{"coredns"}},
	} {
		t.Run(c.manifest, func(t *testing.T) {
			if got := manifestContainers(t, "../../manifests/"+c.manifest, files); !slices.Equal(got, c.want) {
				t.Errorf("checked containers %v, want %v", got, c.want)
			}
		})
	}
}

// manifestContainers checks the containers of one manifest against the
// images' files, and names those it checked.
func manifestContainers(t *testing.T, manifest string, files map[string][]string) []string {
	t.Helper()
	raw, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var checked []string
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		var spec corev1.PodSpec
		switch meta.Kind {
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
			if cm.Name == "calico-config" {
				checkPlugins(t, cm.Data["cni_network_config"], files[NodeImage+":latest"])
			}
			continue
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
			have, ok := files[normalized(c.Image)]
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
			checked = append(checked, c.Name)
		}
	}
	return checked
}

// checkPlugins: every plugin the conflist template names (each entry's
// type, and calico's IPAM) is in the calico-node image's /opt/cni/bin,
// which install-cni copies to the node.
func checkPlugins(t *testing.T, tmpl string, image []string) {
	t.Helper()
	// Placeholders that stand for numbers are not JSON yet.
	var list struct {
		Plugins []struct {
			Type string
			IPAM struct{ Type string }
		}
	}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(tmpl, "__CNI_MTU__", "0")), &list); err != nil {
		t.Fatalf("cni_network_config: %v", err)
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Type)
		if p.IPAM.Type != "" {
			types = append(types, p.IPAM.Type)
		}
	}
	if !slices.Equal(types, []string{"calico", "calico-ipam", "portmap", "bandwidth"}) {
		t.Errorf("the conflist names %v", types)
	}
	for _, typ := range types {
		if !contains(image, "/opt/cni/bin/"+typ) {
			t.Errorf("the conflist chains %s, which the calico-node image does not carry", typ)
		}
	}
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

// normalized is an image name as the kubelet and containerd complete it:
// a first path element that is no host name means Docker Hub.
func normalized(image string) string {
	first, _, nested := strings.Cut(image, "/")
	if !nested {
		return "docker.io/library/" + image
	}
	if !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "docker.io/" + image
	}
	return image
}
