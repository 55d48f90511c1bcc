package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/tls"
	"debug/elf"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"golang.org/x/net/dns/dnsmessage"
)

// inputs are, for each of Arches, the binaries ($PALISADE_BIN/linux-ARCH,
// make image-bins), the packages (hack/image-debs.sh's cache), agnhost
// ($PALISADE_KUBE_BIN/linux-ARCH) and coredns (linux-ARCH of
// hack/coredns.sh's cache): make test provides them all.
func inputs(t *testing.T) []Inputs {
	t.Helper()
	bin := os.Getenv("PALISADE_BIN")
	if bin == "" {
		t.Skip("PALISADE_BIN is not set (make test sets it)")
	}
	dns, err := exec.Command("../coredns.sh", "--print-dir").Output()
	if err != nil {
		t.Fatal(err)
	}
	var in []Inputs
	for _, arch := range Arches {
		out, err := exec.Command("../image-debs.sh", "--print-dir", arch).Output()
		if err != nil {
			t.Fatal(err)
		}
		p := Inputs{Arch: arch, Bin: filepath.Join(bin, "linux-"+arch), Debs: strings.TrimSpace(string(out))}
		if kube := os.Getenv("PALISADE_KUBE_BIN"); kube != "" {
			p.Agnhost = filepath.Join(kube, "linux-"+arch, "agnhost")
		}
		p.CoreDNS = filepath.Join(strings.TrimSpace(string(dns)), "linux-"+arch, "coredns")
		in = append(in, p)
	}
	return in
}

// unpack extracts an archive into dir.
func unpack(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	extract(t, tar.NewReader(f), dir)
}

func extract(t *testing.T, tr *tar.Reader, dir string) map[string]*tar.Header {
	t.Helper()
	files := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, os.FileMode(h.Mode)&os.ModePerm)
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeLink:
			err = os.Link(filepath.Join(dir, h.Linkname), p)
		}
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
	}
}

// elfMachines are the ELF machines of Arches.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// loaders are the dynamic loaders Debian's libc6 puts in the image.
var loaders = map[string]string{"amd64": "lib64/ld-linux-x86-64.so.2", "arm64": "lib/ld-linux-aarch64.so.1"}

// TestImages builds every image for every architecture from the binaries
// and the Debian packages, writes their archives, and reads them back as a
// runtime would: the layout's index names the image and points at an
// image index with one manifest per platform; every blob matches its
// digest; each platform's config has the entrypoint, user and
// architecture, and its layers hold the binaries (ELF for that
// architecture) and, for calico-node, felix's userspace and the chained
// CNI plugins. As root, this machine's platform is run in a chroot of the
// image's file system, and its install-cni installs calico, calico-ipam,
// portmap and bandwidth into a host directory.
func TestImages(t *testing.T) {
	in := inputs(t)
	began := time.Now()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	targets := Targets(in, "test", "v-test", created)
	if err := Check(targets); err != nil {
		t.Fatalf("%v (make image-bins image-debs coredns)", err)
	}
	for _, tg := range targets {
		t.Run(tg.Archive, func(t *testing.T) {
			if got := archesOf(tg.Specs); !slices.Equal(got, Arches) {
				t.Fatalf("platforms %v, want %v", got, Arches)
			}
			idx, err := Index(tg)
			if err != nil {
				t.Fatal(err)
			}
			archive := filepath.Join(t.TempDir(), tg.Archive)
			if err := WriteArchive(archive, idx, tg.Ref); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			unpack(t, archive, dir)
			p, err := layout.FromPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			top, err := p.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			im, err := top.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(im.Manifests) != 1 || im.Manifests[0].MediaType != types.OCIImageIndex ||
				im.Manifests[0].Annotations["io.containerd.image.name"] != tg.Ref ||
				!strings.HasSuffix(tg.Ref, ":"+im.Manifests[0].Annotations["org.opencontainers.image.ref.name"]) {
				t.Fatalf("layout index: %+v", im.Manifests)
			}
			back, err := top.ImageIndex(im.Manifests[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate.Index(back); err != nil {
				t.Fatalf("the archive's blobs do not match their digests: %v", err)
			}
			bm, err := back.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(bm.Manifests) != len(tg.Specs) {
				t.Fatalf("%d platforms in the image index, want %d", len(bm.Manifests), len(tg.Specs))
			}
			for i, d := range bm.Manifests {
				s := tg.Specs[i]
				if d.MediaType != types.OCIManifestSchema1 || d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != s.Arch {
					t.Fatalf("manifest %d: %s %+v, want linux/%s", i, d.MediaType, d.Platform, s.Arch)
				}
				img, err := back.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				t.Run(s.Arch, func(t *testing.T) { checkImage(t, tg, s, img, created) })
			}
		})
	}
	t.Logf("built and read back %d images in %s", len(targets), time.Since(began).Round(time.Millisecond))
}

func archesOf(specs []Spec) []string {
	var a []string
	for _, s := range specs {
		a = append(a, s.Arch)
	}
	return a
}

// checkImage reads one platform's image back.
func checkImage(t *testing.T, tg Target, s Spec, img v1.Image, created time.Time) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != s.Arch || cf.OS != "linux" || cf.Variant != variant(s.Arch) || !slices.Equal(cf.Config.Entrypoint, s.Entrypoint) ||
		!slices.Equal(cf.Config.Cmd, s.Cmd) || cf.Config.User != s.User ||
		cf.Config.Labels["org.opencontainers.image.version"] != "v-test" || !cf.Created.Time.Equal(created) {
		t.Errorf("config: %s/%s/%s entrypoint %v cmd %v user %q labels %v created %v", cf.OS, cf.Architecture, cf.Variant,
			cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User, cf.Config.Labels, cf.Created)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	wantLayers := 1
	if len(s.Debs) > 0 {
		wantLayers = 2
	}
	if len(layers) != wantLayers {
		t.Errorf("%d layers, want %d", len(layers), wantLayers)
	}
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("layer media type %s", mt)
		}
	}
	rootfs := t.TempDir()
	rc := mutate.Extract(img)
	files := extract(t, tar.NewReader(rc), rootfs)
	rc.Close()
	// Every executable of the last layer is a program for the image's
	// platform; the rest are data files (porter's certificate and key).
	for _, f := range s.Files {
		h := files[strings.TrimPrefix(f.Dst, "/")]
		if h == nil || h.Mode != f.Mode {
			t.Errorf("%s: %+v, want mode %o", f.Dst, h, f.Mode)
			continue
		}
		if f.Mode != 0o755 {
			continue
		}
		if m := machine(t, filepath.Join(rootfs, f.Dst)); m != elfMachines[s.Arch] {
			t.Errorf("%s is an ELF for %v, want %v", f.Dst, m, elfMachines[s.Arch])
		}
	}
	for _, d := range s.Dirs {
		if h := files[strings.TrimPrefix(d, "/")]; h == nil || h.Typeflag != tar.TypeDir {
			t.Errorf("no directory %s", d)
		}
	}
	if tg.Ref == CoreDNSRef && s.Arch == runtime.GOARCH {
		corednsPlugins(t, filepath.Join(rootfs, "coredns"))
	}
	if len(s.Debs) == 0 {
		return
	}
	for p := range files {
		if strings.HasPrefix(p, "usr/share/doc/") || strings.HasPrefix(p, "usr/share/man/") {
			t.Errorf("documentation in the image: %s", p)
			break
		}
	}
	// The Debian userspace of each image, and programs of it that must be
	// for the image's platform.
	want, elfs := map[string][]string{
		NodeImage + ":test": {"usr/sbin/ipset", "usr/sbin/xtables-nft-multi", "usr/sbin/xtables-legacy-multi",
			"usr/sbin/iptables-nft-restore", "usr/sbin/iptables-legacy-save", "usr/sbin/iptables", "etc/protocols",
			"opt/cni/bin/portmap", "opt/cni/bin/bandwidth"},
		AgnhostRef: {"bin/sh", "bin/dash", "bin/sleep", "bin/grep", "bin/nc", "usr/bin/curl", "usr/bin/wget", "usr/bin/nslookup"},
	}, map[string][]string{
		NodeImage + ":test": {"usr/sbin/xtables-nft-multi", "usr/sbin/ipset"},
		AgnhostRef:          {"bin/dash", "usr/bin/curl", "bin/nc.openbsd", "usr/bin/nslookup"},
	}
	for _, p := range append(want[tg.Ref], loaders[s.Arch]) {
		if files[p] == nil {
			t.Errorf("the image has no %s", p)
		}
	}
	for _, p := range elfs[tg.Ref] {
		if m := machine(t, filepath.Join(rootfs, p)); m != elfMachines[s.Arch] {
			t.Errorf("%s is an ELF for %v, want %v", p, m, elfMachines[s.Arch])
		}
	}
	if tg.Ref == AgnhostRef {
		if s.Arch == runtime.GOARCH {
			agnhostTools(t, rootfs)
		}
		return
	}
	if s.Arch != runtime.GOARCH {
		return
	}
	installCNI(t, rootfs)
	if os.Geteuid() != 0 {
		t.Log("not root: the image's userspace is not run in a chroot")
		return
	}
	for _, argv := range [][]string{
		{"/usr/sbin/iptables", "--version"}, {"/usr/sbin/iptables-legacy-save", "--version"},
		{"/usr/sbin/ip6tables-nft-restore", "--version"}, {"/usr/sbin/ipset", "version"},
		{"/bin/calico-node", "version"}, {"/bin/install-cni", "version"}, {"/bin/calico-etcd-proxy", "version"},
	} {
		out, err := exec.Command("chroot", append([]string{rootfs}, argv...)...).CombinedOutput()
		if err != nil {
			t.Errorf("chroot %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
		if argv[0] == "/usr/sbin/iptables" && !strings.Contains(string(out), "nf_tables") {
			t.Errorf("iptables in the image is not the nft backend: %s", out)
		}
	}
}

// installCNI runs the image's install-cni on the image's own file system
// (its --root), with the host's CNI directories mounted where the
// manifest mounts them, and checks that every plugin the conflist chains
// reached the host's bin directory, identical to the image's and
// answering CNI's VERSION command there.
func installCNI(t *testing.T, rootfs string) {
	t.Helper()
	sa := "var/run/secrets/kubernetes.io/serviceaccount"
	for _, d := range []string{"host/opt/cni/bin", "host/etc/cni/net.d", sa} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{"token": "token-1", "ca.crt": "CA"} {
		if err := os.WriteFile(filepath.Join(rootfs, sa, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(rootfs, "bin/install-cni"), "--root", rootfs)
	cmd.Env = []string{"SLEEP=false", "KUBERNETES_NODE_NAME=node1", "ETCD_ENDPOINTS=https://198.18.0.1:2379",
		"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install-cni: %v\n%s", err, out)
	}
	for _, pl := range append([]string{"calico", "calico-ipam"}, ChainedPlugins...) {
		got, err := os.ReadFile(filepath.Join(rootfs, "host/opt/cni/bin", pl))
		if err != nil {
			t.Errorf("install-cni did not install %s: %v", pl, err)
			continue
		}
		want, _ := os.ReadFile(filepath.Join(rootfs, "opt/cni/bin", pl))
		if !bytes.Equal(got, want) {
			t.Errorf("%s on the host differs from the image's", pl)
		}
		v := exec.Command(filepath.Join(rootfs, "host/opt/cni/bin", pl))
		v.Env = []string{"CNI_COMMAND=VERSION"}
		if out, err := v.CombinedOutput(); err != nil || !strings.Contains(string(out), "supportedVersions") {
			t.Errorf("%s VERSION on the host: %v\n%s", pl, err, out)
		}
	}
}

// corednsPlugins runs the image's coredns and checks the plugins compiled
// into it: every one manifests/coredns.yaml's Corefile uses, and no
// forward (the cluster DNS must never ask the machine's resolver).
func corednsPlugins(t *testing.T, coredns string) {
	t.Helper()
	out, err := exec.Command(coredns, "-plugins").CombinedOutput()
	if err != nil {
		t.Fatalf("coredns -plugins: %v\n%s", err, out)
	}
	have := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		have[strings.TrimPrefix(l, "dns.")] = true
	}
	for _, p := range []string{"kubernetes", "errors", "health", "ready", "cache", "loop", "reload", "loadbalance", "log", "prometheus"} {
		if !have[p] {
			t.Errorf("coredns lacks the %s plugin: %s", p, out)
		}
	}
	if have["forward"] {
		t.Errorf("coredns has the forward plugin: %s", out)
	}
}

// machine is the ELF machine of the executable at path.
func machine(t *testing.T, path string) elf.Machine {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	return f.Machine
}

// agnhostTools runs, as root in a chroot of the agnhost image, what the
// sig-network e2e suites run in it with `kubectl exec … /bin/sh -x -c`
// (framework/service/jig.go, framework/network/utils.go, service.go)
// against servers on this machine's loopback: nc to a TCP echo server,
// curl and wget to an HTTP one, sleep and grep; and agnhost's own
// connect, which the Netpol suite execs directly.
func agnhostTools(t *testing.T, rootfs string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("not root: the agnhost image's tools are not run in a chroot")
		return
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				if line == "hostName\n" {
					fmt.Fprintln(c, "pod-1")
				}
			}()
		}
	}()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hostname" {
			fmt.Fprint(w, "pod-1")
		}
	}))
	defer web.Close()
	dns := dnsServer(t, "externalsvc.ns-1.svc.cluster.local.", net.IPv4(10, 96, 0, 7))
	echo, url := tcp.Addr().(*net.TCPAddr), web.URL+"/hostname"
	for _, c := range []struct{ argv []string }{
		// As the ExternalName specs resolve a Service (jig.go), here
		// against a server on loopback.
		{[]string{"/bin/sh", "-x", "-c", fmt.Sprintf("nslookup -port=%d externalsvc.ns-1.svc.cluster.local %s && echo pod-1", dns.Port, dns.IP)}},
		{[]string{"/bin/sh", "-x", "-c", fmt.Sprintf("echo hostName | nc -v -t -w 2 %s %d", echo.IP, echo.Port)}},
		{[]string{"/bin/sh", "-x", "-c", "curl -g -q -s --connect-timeout 2 " + url}},
		{[]string{"/bin/sh", "-x", "-c", "wget -T 5 -qO- " + url}},
		{[]string{"/bin/sh", "-c", "sleep 0.1; echo pod-1 | grep -m 1 -E 'pod-[0-9]'"}},
		{[]string{"/agnhost", "connect", echo.String(), "--timeout=2s", "--protocol=tcp"}},
	} {
		out, err := exec.Command("chroot", append([]string{rootfs}, c.argv...)...).CombinedOutput()
		if err != nil || (c.argv[0] == "/bin/sh" && !strings.Contains(string(out), "pod-1")) {
			t.Errorf("chroot %q: %v\n%s", c.argv, err, out)
		}
	}
	porterTLS(t, rootfs)
}

// porterTLS runs agnhost's porter in the image with a TLS port, as the
// Proxy conformance spec does, and reads its answer over TLS: porter
// serves with the image's /localhost.crt and /localhost.key.
func porterTLS(t *testing.T, rootfs string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("chroot", rootfs, "/agnhost", "porter")
	cmd.Env = []string{fmt.Sprintf("SERVE_TLS_PORT_%d=pod-1", port)}
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/", port))
		if err != nil {
			last = err
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "pod-1" {
			t.Fatalf("porter over TLS answered %q, want pod-1", body)
		}
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
			t.Fatal("porter's answer came without a certificate")
		}
		return
	}
	t.Fatalf("porter over TLS: %v\n%s", last, log.String())
}

// dnsServer answers A queries for name with ip on a UDP port of
// loopback, and every other name with NXDOMAIN.
func dnsServer(t *testing.T, name string, ip net.IP) *net.UDPAddr {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			h.Response, h.Authoritative, h.RecursionAvailable = true, true, true
			var answers []dnsmessage.Resource
			switch {
			case q.Name.String() != name:
				h.RCode = dnsmessage.RCodeNameError
			case q.Type == dnsmessage.TypeA:
				answers = append(answers, dnsmessage.Resource{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
					Body:   &dnsmessage.AResource{A: [4]byte(ip.To4())}})
			}
			msg := dnsmessage.Message{Header: h, Questions: []dnsmessage.Question{q}, Answers: answers}
			if out, err := msg.Pack(); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr)
}
