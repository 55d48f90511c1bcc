package commands

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/node/status"
)

type nodeDiagsOptions struct {
	name, nodenameFile, outDir, gobgpAddr string
}

func newNodeDiagsCommand(a *app, nf *nodeFlags) *cobra.Command {
	o := &nodeDiagsOptions{}
	cmd := &cobra.Command{
		Use:   "diags",
		Short: "Collect diagnostics of this node into a tarball",
		Long: `Collect calico-node's logs (from --log-dir), the routes (ip route, ip -6
route), addresses (ip addr), iptables-save of each backend present, ipset
list, the BGP peers (from calico-node's status socket) and RIB (through the
gobgp CLI against calico-node's GoBGP API, when both are there) and the Node
resource as YAML, into a .tar.gz whose path is printed. A part that cannot
be collected is recorded in its file with the reason.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.nodeDiags(cmd.Context(), nf, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&nf.logDir, "log-dir", defaultLogDir, "Directory of calico-node's logs.")
	fl.StringVar(&o.name, "name", "", "Node name (default: the running agent's, else the nodename file's, else the host name).")
	fl.StringVar(&o.nodenameFile, "nodename-file", "/var/lib/calico/nodename", "calico-node's nodename file.")
	fl.StringVar(&o.outDir, "output-dir", "", "Directory for the tarball (default: a new temporary directory).")
	fl.StringVar(&o.gobgpAddr, "gobgp-address", "127.0.0.1:50051", "calico-node's GoBGP gRPC API.")
	return cmd
}

// diagFile is one file of the tarball.
type diagFile struct {
	name string
	data []byte
}

func (a *app) nodeDiags(ctx context.Context, nf *nodeFlags, o *nodeDiagsOptions) error {
	var files []diagFile
	add := func(name string, data []byte) { files = append(files, diagFile{name, data}) }
	cmdOut := func(name string, argv ...string) {
		fmt.Fprintf(a.env.Out, "Collecting %s...\n", strings.Join(argv, " "))
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			out = append(out, []byte(fmt.Sprintf("\n# %s failed: %v\n", strings.Join(argv, " "), err))...)
		}
		add(name, out)
	}
	cmdOut("ip-route.txt", "ip", "route")
	cmdOut("ip6-route.txt", "ip", "-6", "route")
	cmdOut("ip-addr.txt", "ip", "addr")
	for _, be := range []string{"nft", "legacy"} {
		if _, err := exec.LookPath("iptables-" + be + "-save"); err == nil {
			cmdOut("iptables-save-"+be+".txt", "iptables-"+be+"-save")
			cmdOut("ip6tables-save-"+be+".txt", "ip6tables-"+be+"-save")
		}
	}
	if _, err := exec.LookPath("ipset"); err == nil {
		cmdOut("ipset-list.txt", "ipset", "list")
	}

	fmt.Fprintln(a.env.Out, "Collecting BGP status...")
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	rep, serr := status.Fetch(sctx, nf.socket())
	cancel()
	if serr != nil {
		add("bgp-peers.txt", []byte(fmt.Sprintf("calico-node status not available: %v\n", serr)))
	} else {
		var b bytes.Buffer
		_ = writeNodeStatus(&b, rep)
		js, _ := json.MarshalIndent(rep, "", "  ")
		add("bgp-peers.txt", b.Bytes())
		add("node-status.json", js)
		if _, err := exec.LookPath("gobgp"); err == nil {
			host, port, _ := strings.Cut(o.gobgpAddr, ":")
			cmdOut("bgp-neighbors.txt", "gobgp", "-u", host, "-p", port, "neighbor")
			cmdOut("bgp-rib-ipv4.txt", "gobgp", "-u", host, "-p", port, "global", "rib", "-a", "ipv4")
			cmdOut("bgp-rib-ipv6.txt", "gobgp", "-u", host, "-p", port, "global", "rib", "-a", "ipv6")
		} else {
			add("bgp-rib-ipv4.txt", []byte("the gobgp CLI is not installed; the RIB was not collected\n"))
		}
	}

	name := o.name
	if name == "" && serr == nil {
		name = rep.NodeName
	}
	if name == "" {
		if b, err := os.ReadFile(o.nodenameFile); err == nil {
			name = strings.TrimSpace(string(b))
		}
	}
	if name == "" {
		name, _ = os.Hostname()
	}
	fmt.Fprintf(a.env.Out, "Collecting node %q...\n", name)
	add("node.yaml", a.nodeYAML(ctx, name))

	fmt.Fprintf(a.env.Out, "Collecting logs from %s...\n", nf.logDir)
	entries, err := os.ReadDir(nf.logDir)
	if err != nil {
		add("logs/README.txt", []byte(fmt.Sprintf("no logs: %v\n", err)))
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			if b, err := os.ReadFile(filepath.Join(nf.logDir, e.Name())); err == nil {
				add("logs/"+e.Name(), b)
			}
		}
	}

	dir := o.outDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "calico-diags-"); err != nil {
			return err
		}
	}
	path := filepath.Join(dir, "diags-"+time.Now().Format("20060102_150405")+".tar.gz")
	if err := writeTarball(path, files); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Fprintf(a.env.Out, "\nDiags saved to %s\n", path)
	return nil
}

// nodeYAML reads the Node from the datastore, or says why it could not.
func (a *app) nodeYAML(ctx context.Context, name string) []byte {
	c, done, err := a.connect(ctx)
	if err != nil {
		return []byte(fmt.Sprintf("# %v\n", err))
	}
	defer done()
	r, err := c.Get(ctx, datastore.Key{Kind: v3.KindNode, Name: name})
	if err != nil {
		return []byte(fmt.Sprintf("# reading node %q: %v\n", name, err))
	}
	b, err := yaml.Marshal(r)
	if err != nil {
		return []byte(fmt.Sprintf("# %v\n", err))
	}
	return b
}

func writeTarball(path string, files []diagFile) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	now := time.Now()
	root := strings.TrimSuffix(filepath.Base(path), ".tar.gz")
	for _, df := range files {
		hdr := &tar.Header{Name: root + "/" + df.name, Mode: 0o644, Size: int64(len(df.data)), ModTime: now, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, bytes.NewReader(df.data)); err != nil {
			return err
		}
	}
	for _, c := range []io.Closer{tw, gz, f} {
		if err := c.Close(); err != nil {
			return err
		}
	}
	return nil
}
