// Command lab builds and drives a Palisade fabric on this machine out of
// network namespaces (see package lab): up, down, status, exec, pod and
// the demo that `make demo` runs.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/lab"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
)

func main() {
	lab.MaybeSupervise()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		fmt.Fprintln(os.Stderr, "lab:", err)
		os.Exit(1)
	}
}

// exitCode passes a command's exit status through exec.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

type globals struct {
	name, stateDir, binDir string
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "lab",
		Short: "A whole Palisade fabric on one machine, out of network namespaces",
		Long: `lab builds a Palisade fabric on this machine: node namespaces on a bridge,
each running calico-node (node 1 serves the embedded etcd), an optional BIRD
route reflector and border router, and pods made by the real calico CNI
plugin. Everything is named pl-<name>-… and recorded in the state directory
so "lab down" removes it all. Needs root.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.name, "name", "", "Lab name (default: random for up, the only lab for other commands)")
	pf.StringVar(&g.stateDir, "state-dir", "", "Directory of the labs' state (PALISADE_LAB_DIR; default "+lab.DefaultStateRoot+")")
	pf.StringVar(&g.binDir, "bin-dir", "", "Directory of calico-node, calicoctl, calico, calico-ipam (PALISADE_BIN; default beside lab)")
	root.AddCommand(newUp(g), newDown(g), newStatus(g), newExec(g), newPod(g), newList(g), newDemo(g), newPing(g), newVersion(),
		newProbe(g), newKubectl(g))
	return root
}

// open opens the named lab, or the only one.
func (g *globals) open(cmd *cobra.Command) (*lab.Lab, error) {
	name := g.name
	if name == "" {
		names, err := lab.List(g.stateDir)
		if err != nil {
			return nil, err
		}
		switch len(names) {
		case 0:
			return nil, errors.New("no lab is running (lab up)")
		case 1:
			name = names[0]
		default:
			return nil, fmt.Errorf("several labs run (%s): say which with --name", strings.Join(names, ", "))
		}
	}
	return lab.Open(g.stateDir, name, cmd.OutOrStdout())
}

func newUp(g *globals) *cobra.Command {
	o := lab.Options{}
	c := &cobra.Command{
		Use:   "up",
		Short: "Build a lab and wait for its BGP sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Name, o.StateRoot, o.BinDir, o.Progress = g.name, g.stateDir, g.binDir, cmd.OutOrStdout()
			if cmd.Flags().Changed("kube-proxy") && !o.KubeProxy && o.Kubelet && !o.BPF {
				return errors.New("--kube-proxy=false with --kubelet needs --bpf: the iptables dataplane does not load-balance Services, kube-proxy does")
			}
			l, err := lab.Up(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			l.PrintHints(cmd.OutOrStdout(), selfCommand())
			return l.Close()
		},
	}
	f := c.Flags()
	f.IntVar(&o.Nodes, "nodes", 3, "Number of nodes")
	f.StringVar(&o.RR, "rr", lab.RRNone, "Route reflector: bird2, bird1 (BIRD 1.6) or none")
	f.StringVar(&o.Peering, "peering", "", "Initial topology: rr (default with --rr), mesh, or node-rr (node1 a route reflector for the others)")
	f.BoolVar(&o.Border, "border", false, "Add a BIRD border router in AS 65001 peering eBGP with every node")
	f.StringVar(&o.Etcd, "etcd", "", "etcd: embedded (calico-node on node1; the default), external (/usr/bin/etcd in its own namespace; the default with --kubelet) or cluster (three members, each in its own namespace); TLS with client certificates either way")
	f.StringVar(&o.PoolCIDR, "pool", "10.244.0.0/16", "Default IPv4 pool")
	f.StringVar(&o.LogLevel, "log-level", "info", "calico-node's log level")
	f.IntVar(&o.Subnets, "subnets", 1, "1, or 2: odd nodes in 198.18.0.0/24, even ones in 198.18.1.0/24 behind a router namespace")
	f.StringVar(&o.Backend, "backend", lab.BackendBird, "CALICO_NETWORKING_BACKEND: bird (BGP) or vxlan (no BGP at all)")
	f.StringVar(&o.VXLAN, "vxlan", "", "The pools' vxlanMode: Never (default with bird), Always (default with vxlan) or CrossSubnet")
	f.BoolVar(&o.IPv6, "ipv6", false, "IPv6 too: node addresses and the pool "+lab.PoolCIDR6)
	f.BoolVar(&o.BPF, "bpf", false, "felix's eBPF dataplane (FelixConfiguration bpfEnabled: true) instead of iptables")
	f.BoolVar(&o.FloatingIPs, "floating-ips", false, "Floating IPs (cni.projectcalico.org/floatingIPs): the CNI config's feature_control.floating_ips, FelixConfiguration floatingIPs: Enabled, and the pool "+lab.FloatingPoolCIDR)
	f.BoolVar(&o.Kubernetes, "kubernetes", false, "Add a Kubernetes control plane (kube-apiserver, kube-controller-manager, calico-kube-controllers); pods become Pod objects")
	f.BoolVar(&o.KubeProxy, "kube-proxy", false, "Run the real kube-proxy (iptables mode) in every node's namespace (needs --kubernetes; the default with --kubelet unless --bpf, whose felix replaces it: --kube-proxy=true keeps it beside felix)")
	f.BoolVar(&o.Kubelet, "kubelet", false, "Real nodes: a kubelet and a containerd in every node's namespaces, kube-scheduler, and Palisade installed from its manifest and images (implies --kubernetes, and --kube-proxy unless --bpf; etcd external unless cluster)")
	f.BoolVar(&o.ReferenceCNI, "reference-cni", false, "With --kubelet: no Palisade; the reference plugins (bridge, host-local) on the same nodes, for benchmarks")
	f.StringVar(&o.ImagesDir, "images", "", "With --kubelet: the directory of the OCI image archives make images builds (PALISADE_IMAGES; default images/ found upward)")
	f.StringVar(&o.Manifest, "manifest", "", "With --kubelet: the manifest to install (default manifests/calico-etcd.yaml found upward)")
	f.StringVar(&o.KubeBinDir, "kube-bin-dir", "", "Directory of kube-apiserver, kube-controller-manager, kubectl and kube-proxy (PALISADE_KUBE_BIN; default hack/kube-tools.sh's cache)")
	return c
}

func newDown(g *globals) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "down",
		Short: "Remove a lab: processes, namespaces and state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all {
				names, err := lab.List(g.stateDir)
				if err != nil {
					return err
				}
				var errs []error
				for _, n := range names {
					l, err := lab.Open(g.stateDir, n, cmd.OutOrStdout())
					if err == nil {
						err = l.Down(cmd.Context())
					}
					errs = append(errs, err)
				}
				return errors.Join(errs...)
			}
			l, err := g.open(cmd)
			if err != nil {
				return err
			}
			return l.Down(cmd.Context())
		},
	}
	c.Flags().BoolVar(&all, "all", false, "Remove every lab")
	return c
}

func newStatus(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Print each node's calicoctl node status and routes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := g.open(cmd)
			if err != nil {
				return err
			}
			defer l.Close()
			return l.Status(cmd.Context(), cmd.OutOrStdout())
		},
	}
}

func newExec(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "exec <node|rr|border|etcd|fabric|namespace/pod> -- command [args...]",
		Short: "Run a command in a lab namespace (calicoctl there talks to the lab's etcd)",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := g.open(cmd)
			if err != nil {
				return err
			}
			// Release the lock: the command may call lab itself.
			_ = l.Close()
			code, err := l.Exec(cmd.Context(), args[0], args[1:], os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
}

func newPod(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "pod", Short: "Add or delete pods (through the calico CNI plugin)"}
	var labels, serve, ip, annotations, owner string
	add := &cobra.Command{
		Use:   "add <node> <namespace>/<pod>",
		Short: "Create a pod on a node with CNI ADD (with --kubernetes, a Pod object first)",
		Long: `add creates a pod on a node as kubelet would: with --kubernetes its Pod object
first (spec.nodeName set, --labels and --annotations on it), then a network
namespace and the calico CNI plugin's ADD, then the Pod's status.

--owner statefulset/NAME makes the pod a StatefulSet's, as its controller
would: the pod must be named NAME-<ordinal>; the StatefulSet is created when
missing (or scaled up to ordinal+1 replicas when it has fewer), and the pod
gets its template's labels, the statefulset.kubernetes.io/pod-name and
apps.kubernetes.io/pod-index labels, and the controller ownerReference. With
the annotation cni.projectcalico.org/ipReleasePolicy=immutable (or never) the
pod keeps its address when it is re-created, on any node:

  lab pod add node1 default/db-0 --owner statefulset/db \
      --annotations cni.projectcalico.org/ipReleasePolicy=immutable`,
		Example: `  lab pod add node1 default/web --labels app=web --serve 80/tcp
  lab pod add node2 default/db-0 --owner statefulset/db --annotations cni.projectcalico.org/ipReleasePolicy=never`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, err := lab.ParsePodKey(args[1])
			if err != nil {
				return err
			}
			var o lab.PodOptions
			if o.Labels, err = lab.ParseLabels(labels); err != nil {
				return err
			}
			if o.Serve, err = lab.ParseServe(serve); err != nil {
				return err
			}
			if ip != "" {
				if o.IP, err = netip.ParseAddr(ip); err != nil {
					return fmt.Errorf("--ip %q: %w", ip, err)
				}
			}
			if o.Annotations, err = lab.ParseAnnotations(annotations); err != nil {
				return err
			}
			if o.Owner, err = lab.ParseOwner(owner); err != nil {
				return err
			}
			l, err := g.open(cmd)
			if err != nil {
				return err
			}
			defer l.Close()
			p, err := l.AddPodWith(cmd.Context(), args[0], ns, name, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", p.Key(), p.IP)
			return nil
		},
	}
	f := add.Flags()
	f.StringVar(&labels, "labels", "", "Labels k=v,k=v (the Pod's; without --kubernetes, its WorkloadEndpoint's)")
	f.StringVar(&serve, "serve", "", "Ports the pod's server answers on, as 80/tcp,81/udp,80/sctp (named container ports serve-<port>-<protocol>)")
	f.StringVar(&ip, "ip", "", "Ask for this address (the cni.projectcalico.org/ipAddrs annotation; needs --kubernetes)")
	f.StringVar(&annotations, "annotations", "", "Annotations k=v,k=v set on the Pod object before the CNI ADD (needs --kubernetes)")
	f.StringVar(&owner, "owner", "", "The pod's owner: statefulset/NAME, created when missing; the pod is named NAME-<ordinal> (needs --kubernetes)")
	c.AddCommand(add, &cobra.Command{
		Use:   "del <node> <namespace>/<pod>",
		Short: "Delete a pod with CNI DEL",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := g.open(cmd)
			if err != nil {
				return err
			}
			defer l.Close()
			if p, ok := l.Pod(args[1]); ok && p.Node != args[0] {
				return fmt.Errorf("pod %s runs on %s, not %s", args[1], p.Node, args[0])
			}
			return l.DelPod(cmd.Context(), args[1])
		},
	})
	return c
}

func newProbe(g *globals) *cobra.Command {
	var port int
	var protocol string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "probe <from: node|namespace/pod> <to: namespace/pod|address>",
		Short: "Connect (TCP), send a datagram (UDP) or an SCTP INIT to a pod's server; exit 0 when answered",
		Long: `probe opens a TCP connection to the pod's server and reads its answer, or sends
a UDP datagram and waits for the answer, or sends an SCTP INIT (from a raw
socket: this kernel has no SCTP stack) and waits for the INIT-ACK. It exits 0
when the answer comes and 1 when it does not within --timeout.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			proto, err := lab.ParseProtocol(protocol)
			if err != nil {
				return err
			}
			if port < 1 || port > 65535 {
				return fmt.Errorf("--port %d: want 1-65535", port)
			}
			l, err := g.open(cmd)
			if err != nil {
				return err
			}
			defer l.Close()
			dst, err := netip.ParseAddr(args[1])
			if err != nil {
				p, ok := l.Pod(args[1])
				if !ok {
					return fmt.Errorf("%q is neither an address nor a pod", args[1])
				}
				dst = p.IP
			}
			began := time.Now()
			if err := l.Probe(cmd.Context(), args[0], dst, port, proto, timeout); err != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "✗ %v (after %s)\n", err, time.Since(began).Round(time.Millisecond))
				return exitCode(1)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "✓ %s → %s %s/%d answered in %s\n", args[0], args[1], proto, port, time.Since(began).Round(time.Microsecond))
			return nil
		},
	}
	c.Flags().IntVar(&port, "port", 80, "Port")
	c.Flags().StringVar(&protocol, "protocol", "tcp", "tcp, udp or sctp")
	c.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "How long to wait for the answer")
	return c
}

func newKubectl(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "kubectl -- <kubectl arguments>",
		Short: "Run kubectl against the lab's API server (lab up --kubernetes)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := g.open(cmd)
			if err != nil {
				return err
			}
			_ = l.Close()
			code, err := l.Kubectl(cmd.Context(), args, os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
}

func newList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the labs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			names, err := lab.List(g.stateDir)
			for _, n := range names {
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			return err
		},
	}
}

func newDemo(g *globals) *cobra.Command {
	var keep bool
	c := &cobra.Command{
		Use:   "demo",
		Short: "3 nodes, a BIRD route reflector, Kubernetes, 6 pods, the ping matrix, one NetworkPolicy; then remove it all",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv("KEEP") == "1" {
				keep = true
			}
			return lab.Demo(cmd.Context(), lab.DemoOptions{Name: g.name, Keep: keep, BinDir: g.binDir, StateRoot: g.stateDir,
				Out: cmd.OutOrStdout(), LabCommand: selfCommand()})
		},
	}
	c.Flags().BoolVar(&keep, "keep", false, "Leave the lab running (also KEEP=1)")
	return c
}

// selfCommand is how the user ran this binary, for the hints it prints:
// relative to the working directory when below it ("bin/lab"), else its
// absolute path.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "lab"
	}
	if wd, err := os.Getwd(); err == nil && strings.HasPrefix(exe, wd+"/") {
		return strings.TrimPrefix(exe, wd+"/")
	}
	return exe
}

// newVersion is the binaries' version command, printing on stdout like
// lab's other commands.
func newVersion() *cobra.Command {
	c := buildinfo.Command()
	c.SetOut(os.Stdout)
	return c
}

func newPing(g *globals) *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "ping <from: node|namespace/pod|rr|border> <to: address|namespace/pod|node>",
		Short: "ICMP echo from inside a lab namespace (no ping binary needed)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := g.open(cmd)
			if err != nil {
				return err
			}
			defer l.Close()
			dst, err := netip.ParseAddr(args[1])
			if err != nil {
				if p, ok := l.Pod(args[1]); ok {
					dst = p.IP
				} else if n, ok := l.Node(args[1]); ok {
					dst = n.IP
				} else {
					return fmt.Errorf("%q is neither an address, a pod nor a node", args[1])
				}
			}
			rtt, err := l.Ping(cmd.Context(), args[0], dst, timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s → %s: reply in %s\n", args[0], dst, rtt.Round(time.Microsecond))
			return nil
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "How long to wait for a reply")
	return c
}
