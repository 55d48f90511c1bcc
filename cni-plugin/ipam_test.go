package cniplugin

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCalicoIPAMUnderBridge uses calico-ipam alone under the reference
// bridge plugin: the pod's address comes from the pool, is held by the
// container's handle, and DEL releases it.
func TestCalicoIPAMUnderBridge(t *testing.T) {
	c := newCluster(t)
	c.addPool("pool-a", "10.72.0.0/16", 26)
	n := c.newNode("node1")
	p := n.newPod("default", "bridged")
	list := confList(t, "1.0.0", "k8s-pod-network", []map[string]any{{
		"type": "bridge", "bridge": "plbr0",
		"ipam": map[string]any{"type": "calico-ipam"},
	}})
	// calico-ipam reads etcd_endpoints and nodename at the top level of its
	// configuration, as Calico's does.
	list = confWith(t, list, "etcd_endpoints", n.etcd)
	list = confWith(t, list, "nodename", n.name)
	rt := p.runtimeConf(true)
	r, err := n.add(list, rt)
	if err != nil {
		t.Fatalf("ADD bridge + calico-ipam: %v", err)
	}
	_, addrs := resultAddrs(t, r)
	if len(addrs) != 1 || !netip.MustParsePrefix("10.72.0.0/16").Contains(addrs[0].Addr()) || addrs[0].Bits() != 26 {
		t.Fatalf("result %v, want one address from 10.72.0.0/16 with its block's /26", addrs)
	}
	if got := c.handleIPs(t, handleOf(p)); !slices.Equal(got, []netip.Addr{addrs[0].Addr()}) {
		t.Errorf("handle %s holds %v, want [%s]", handleOf(p), got, addrs[0].Addr())
	}
	if ps := p.state(t); !slices.Contains(ps.addrs, addrs[0].String()) {
		t.Errorf("pod addresses %v, want %s", ps.addrs, addrs[0])
	}
	if err := n.check(list, rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := n.del(list, rt); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := c.allocated(t); len(got) != 0 {
		t.Errorf("addresses left after DEL: %v", got)
	}
}

// TestErrorsAndHumanInvocations: a bad configuration prints the spec's
// error document on stdout with its code and exits 1, logs never reach
// stdout, and without CNI_COMMAND the binaries answer --help and version.
func TestErrorsAndHumanInvocations(t *testing.T) {
	if binDir == "" {
		t.Skip("no binaries")
	}
	const good = `"cniVersion":"1.0.0","name":"net","nodename":"n1","etcd_endpoints":"http://127.0.0.1:1","datastore_timeout":"300ms"`
	cases := []struct {
		name     string
		bin      string
		conf     string
		env      []string // overrides CNI_* variables; "CNI_COMMAND=" unsets it
		wantCode uint
		wantMsg  string
	}{
		{"no type", "calico", `{` + good + `,"ipam":{"type":"calico-ipam"}}`, nil, 7, `network "net": type is required`},
		{"no ipam type", "calico", `{` + good + `,"type":"calico","ipam":{}}`, nil, 7, `network "net": ipam.type is required`},
		{"garbage CNI_ARGS", "calico", `{` + good + `,"type":"calico","ipam":{"type":"calico-ipam"}}`,
			[]string{"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAME"}, 4, `CNI_ARGS "IgnoreUnknown=1;K8S_POD_NAME": pair "K8S_POD_NAME" is not KEY=VALUE`},
		{"garbage CNI_ARGS to calico-ipam", "calico-ipam", `{` + good + `,"type":"calico","ipam":{"type":"calico-ipam"}}`,
			[]string{"CNI_ARGS=K8S_POD_NAMESPACE=a=b"}, 4, `pair "K8S_POD_NAMESPACE=a=b" is not KEY=VALUE`},
		{"malformed prevResult", "calico", `{` + good + `,"type":"calico","ipam":{"type":"calico-ipam"},"prevResult":{"ips":"nope"}}`, nil, 6,
			`network "net": prevResult: could not parse prevResult`},
		{"malformed prevResult on CHECK", "calico-ipam", `{` + good + `,"type":"calico","ipam":{"type":"calico-ipam"},"prevResult":{"interfaces":7}}`,
			[]string{"CNI_COMMAND=CHECK"}, 6, `network "net": prevResult: could not parse prevResult`},
		{"no CNI_COMMAND", "calico", `{` + good + `,"type":"calico","ipam":{"type":"calico-ipam"}}`, []string{"CNI_COMMAND="}, 4,
			"calico: the environment variable CNI_COMMAND is not set"},
		{"no CNI_COMMAND to calico-ipam", "calico-ipam", `{` + good + `,"type":"calico","ipam":{"type":"calico-ipam"}}`, []string{"CNI_COMMAND="}, 4,
			"calico-ipam: the environment variable CNI_COMMAND is not set"},
		{"kubernetes datastore", "calico", `{"cniVersion":"1.0.0","name":"net","type":"calico","datastore_type":"kubernetes","nodename":"n1","ipam":{"type":"calico-ipam"}}`, nil, 7, `datastore_type "kubernetes" is not supported`},
		{"not JSON", "calico", `{"cniVersion":"1.0.0","name":`, nil, 6, ""},
		{"no etcd endpoints", "calico-ipam", `{"cniVersion":"1.0.0","name":"net","type":"calico-ipam","nodename":"n1","log_level":"debug","ipam":{"type":"calico-ipam"}}`, nil, 7, "etcd_endpoints is required"},
		{"bad assign_ipv6", "calico-ipam", `{"cniVersion":"1.0.0","name":"net","type":"calico-ipam","nodename":"n1","ipam":{"type":"calico-ipam","assign_ipv6":"yes"}}`, nil, 7, `ipam.assign_ipv6 "yes"`},
		{"unreachable etcd", "calico-ipam", `{"cniVersion":"1.0.0","name":"net","type":"calico-ipam","nodename":"n1","etcd_endpoints":"http://127.0.0.1:1","datastore_timeout":"300ms","ipam":{"type":"calico-ipam"}}`, nil, 11, "connecting to the datastore"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(binDir, tc.bin))
			env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc123", "CNI_NETNS": "/proc/self/ns/net",
				"CNI_IFNAME": "eth0", "CNI_PATH": binDir}
			for _, e := range tc.env {
				k, v, _ := strings.Cut(e, "=")
				env[k] = v
			}
			cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "CNI_") })
			for k, v := range env {
				if v != "" {
					cmd.Env = append(cmd.Env, k+"="+v)
				}
			}
			cmd.Stdin = strings.NewReader(tc.conf)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1 (stdout %s, stderr %s)", err, stdout.String(), stderr.String())
			}
			var doc struct {
				Code uint   `json:"code"`
				Msg  string `json:"msg"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
				t.Fatalf("stdout is not one CNI error document: %v: %q", err, stdout.String())
			}
			if doc.Code != tc.wantCode || !strings.Contains(doc.Msg, tc.wantMsg) {
				t.Errorf("error %+v, want code %d and a message containing %q", doc, tc.wantCode, tc.wantMsg)
			}
		})
	}
	for _, bin := range []string{"calico", "calico-ipam"} {
		for _, arg := range []string{"--help", "version"} {
			cmd := exec.Command(filepath.Join(binDir, bin), arg)
			cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "CNI_COMMAND=") })
			out, err := cmd.Output()
			if err != nil || !strings.Contains(string(out), map[string]string{"--help": "CNI plugin", "version": "Version"}[arg]) {
				t.Errorf("%s %s: %v: %q", bin, arg, err, out)
			}
		}
	}
}
