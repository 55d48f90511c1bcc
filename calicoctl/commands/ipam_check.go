package commands

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/apiconfig"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/ipam"
)

type ipamCheckOptions struct {
	showAllIPs     bool
	showProblemIPs bool
	output         string
	kubeconfig     string
}

func newIPAMCheckCommand(a *app) *cobra.Command {
	o := &ipamCheckOptions{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the integrity of the IPAM datastructures",
		Long: "Check cross-references IPAM's allocations with the WorkloadEndpoints, nodes\n" +
			"and LoadBalancer Services (read with --kubeconfig) that use addresses, in\n" +
			"Calico's sections: addresses allocated but not in use (leaked), addresses in\n" +
			"use but not allocated or outside every active pool, addresses with several\n" +
			"owners, handles with no address, and handles named in blocks that do not\n" +
			"exist. With -o it writes Calico's JSON report, which\n" +
			"`ipam release --from-report` takes. It changes nothing.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.ipamCheck(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.showAllIPs, "show-all-ips", false, "Print all IPs that are checked.")
	cmd.Flags().BoolVar(&o.showProblemIPs, "show-problem-ips", false, "Print all IPs that are leaked or not allocated properly.")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Path to output report file.")
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file of the API server holding the Services (default: KUBECONFIG, then kubeconfig in the config file).")
	return cmd
}

// checkReport is the report `ipam check -o` writes, in Calico's schema.
type checkReport struct {
	// Version of calicoctl that wrote the report.
	Version             string `json:"version"`
	ClusterGUID         string `json:"clusterGUID"`
	DatastoreLocked     bool   `json:"datastoreLocked"`
	ClusterInfoRevision string `json:"clusterInformationRevision"`
	ClusterType         string `json:"clusterType"`
	// Allocations are, per address, its allocations (more than one only
	// when blocks overlap).
	Allocations   map[string][]*checkAllocation `json:"allocations"`
	LeakedHandles []checkHandle                 `json:"leakedHandles,omitempty"`
}

// checkAllocation is one allocated address, cross-referenced with what
// uses it.
type checkAllocation struct {
	IP                string  `json:"ip"`
	Handle            string  `json:"handle,omitempty"`
	SequenceNumber    *uint64 `json:"sequenceNumber,omitempty"`
	Pod               string  `json:"pod,omitempty"`
	Namespace         string  `json:"namespace,omitempty"`
	Node              string  `json:"node,omitempty"`
	Type              string  `json:"type,omitempty"`
	CreationTimestamp string  `json:"creationTimestamp,omitempty"`
	// InUse: a WorkloadEndpoint or a node uses the address.
	InUse bool `json:"inUse"`
	// Borrowed: the address's node is not the one its block is affine to.
	Borrowed bool `json:"borrowed,omitempty"`
	// Reserved is a sticky reservation's release policy (immutable,
	// never): kept for its owner while no pod uses it, so never leaked
	// and never released from a report.
	Reserved string   `json:"reserved,omitempty"`
	Owners   []string `json:"owners"`

	attrs map[string]string
	// lb: a Service's LoadBalancer address, in use while its Service is.
	lb bool
}

// checkHandle is a handle as the report names it (Calico's field names;
// UID is always null in an etcd datastore).
type checkHandle struct {
	ID       string  `json:"ID"`
	UID      *string `json:"UID"`
	Revision string  `json:"Revision"`
}

// attrString is how Calico prints an allocation's attributes.
func (c *checkAllocation) attrString() string {
	primary := c.Handle
	if primary == "" {
		primary = "<none>"
	}
	var kvs []string
	for _, k := range slices.Sorted(maps.Keys(c.attrs)) {
		kvs = append(kvs, k+"="+c.attrs[k])
	}
	return fmt.Sprintf("Main:%s Extra:%s", primary, strings.Join(kvs, ","))
}

// ipamChecker holds one check's findings.
type ipamChecker struct {
	out            io.Writer
	showAllIPs     bool
	showProblemIPs bool
	allocations    map[netip.Addr][]*checkAllocation
	byNode         map[string]int
	inUse          map[netip.Addr][]string // address → owners
	inUseHandles   map[string]bool
}

// ipamCheck compares what IPAM allocated with what uses addresses, step
// by step as Calico's calicoctl does, and prints (and with -o, writes) what
// disagrees.
func (a *app) ipamCheck(ctx context.Context, o *ipamCheckOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	s, err := a.connectIPAM(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	c := &ipamChecker{out: a.env.Out, showAllIPs: o.showAllIPs, showProblemIPs: o.showAllIPs || o.showProblemIPs,
		allocations: map[netip.Addr][]*checkAllocation{}, byNode: map[string]int{}, inUse: map[netip.Addr][]string{},
		inUseHandles: map[string]bool{}}
	out := c.out
	fmt.Fprintln(out, "Checking IPAM for inconsistencies...")
	fmt.Fprintln(out)

	rep := checkReport{Version: buildinfo.Get().Version}
	if err := readClusterInfo(ctx, s, &rep); err != nil {
		return err
	}
	if err := c.loadBlocks(ctx, s); err != nil {
		return err
	}
	active, err := c.loadPools(ctx, s)
	if err != nil {
		return err
	}
	if err := c.loadNodes(ctx, s); err != nil {
		return err
	}
	if err := c.loadWorkloads(ctx, s); err != nil {
		return err
	}
	if lb := c.loadBalancerAllocations(); len(lb) > 0 {
		if err := a.checkLoadBalancerServices(ctx, c, lb, o.kubeconfig); err != nil {
			return err
		}
		fmt.Fprintf(out, "Workloads, nodes and Services are using %d IPs.\n", len(c.inUse))
	} else {
		fmt.Fprintf(out, "Workloads and nodes are using %d IPs.\n", len(c.inUse))
	}
	fmt.Fprintln(out)

	fmt.Fprintln(out, "Loading all handles")
	handles, err := s.alloc.ListHandles(ctx)
	if err != nil {
		return fmt.Errorf("failed to list handles: %w", err)
	}

	c.printTopNodes()

	numProblems := c.scanNotInUse()
	numProblems += c.scanNotAllocated(active)
	leaked, stored := c.scanHandles(handles)
	rep.LeakedHandles = leaked
	numProblems += len(leaked)
	c.scanMissingHandles(stored)
	fmt.Fprintf(out, "Check complete; found %d problems.\n", numProblems)

	if o.output != "" {
		return c.writeReport(o.output, rep)
	}
	return nil
}

// readClusterInfo puts the ClusterInformation's identity into rep (none
// stored is no error).
func readClusterInfo(ctx context.Context, s *ipamSession, rep *checkReport) error {
	ci, err := s.client.Get(ctx, datastore.Key{Kind: v3.KindClusterInformation, Name: "default"})
	switch {
	case err == nil:
		info := ci.(*v3.ClusterInformation)
		rep.ClusterGUID, rep.ClusterType = info.Spec.ClusterGUID, info.Spec.ClusterType
		rep.ClusterInfoRevision = info.ResourceVersion
		rep.DatastoreLocked = info.Spec.DatastoreReady != nil && !*info.Spec.DatastoreReady
	case !errors.Is(err, datastore.ErrNotFound):
		return fmt.Errorf("reading ClusterInformation default: %w", err)
	}
	return nil
}

// loadBlocks records every allocation of every IPAM block.
func (c *ipamChecker) loadBlocks(ctx context.Context, s *ipamSession) error {
	out := c.out
	fmt.Fprintln(out, "Loading all IPAM blocks...")
	blocks, err := s.alloc.ListBlocks(ctx)
	if err != nil {
		return fmt.Errorf("failed to list IPAM blocks: %w", err)
	}
	fmt.Fprintf(out, "Found %d IPAM blocks.\n", len(blocks))
	numAllocs := 0
	for _, b := range blocks {
		aff := "<none>"
		if b.Host != "" {
			aff = "host:" + b.Host
		}
		fmt.Fprintf(out, " IPAM block %s affinity=%s:\n", b.CIDR, aff)
		for _, al := range b.Allocations {
			numAllocs++
			c.recordAllocation(b, al)
		}
	}
	fmt.Fprintf(out, "IPAM blocks record %d allocations.\n", numAllocs)
	fmt.Fprintln(out)
	return nil
}

// loadPools returns the CIDRs of the enabled IP pools.
func (c *ipamChecker) loadPools(ctx context.Context, s *ipamSession) ([]netip.Prefix, error) {
	out := c.out
	fmt.Fprintln(out, "Loading all IPAM pools...")
	poolList, _, err := s.client.List(ctx, datastore.ListOptions{Kind: v3.KindIPPool})
	if err != nil {
		return nil, fmt.Errorf("failed to load IP pools: %w", err)
	}
	var active []netip.Prefix
	for _, r := range poolList {
		p := r.(*v3.IPPool)
		if p.Spec.Disabled {
			continue
		}
		fmt.Fprintf(out, "  %s\n", p.Spec.CIDR)
		cidr, err := netip.ParsePrefix(p.Spec.CIDR)
		if err != nil {
			fmt.Fprintf(out, "  (IP pool %s: CIDR %q does not parse; skipped)\n", p.Name, p.Spec.CIDR)
			continue
		}
		active = append(active, cidr.Masked())
	}
	fmt.Fprintf(out, "Found %d active IP pools.\n", len(active))
	fmt.Fprintln(out)
	return active, nil
}

// loadNodes records the nodes' tunnel addresses as in use.
func (c *ipamChecker) loadNodes(ctx context.Context, s *ipamSession) error {
	out := c.out
	fmt.Fprintln(out, "Loading all nodes.")
	nodes, _, err := s.client.List(ctx, datastore.ListOptions{Kind: v3.KindNode})
	if err != nil {
		return fmt.Errorf("failed to list nodes: %w", err)
	}
	numNodeIPs := 0
	for _, r := range nodes {
		n := r.(*v3.Node)
		addrs := []string{n.Spec.IPv4VXLANTunnelAddr, n.Spec.IPv6VXLANTunnelAddr}
		if n.Spec.BGP != nil {
			addrs = append(addrs, n.Spec.BGP.IPv4IPIPTunnelAddr)
		}
		for _, a := range addrs {
			if a == "" {
				continue
			}
			ip, err := normaliseIP(a)
			if err != nil {
				return fmt.Errorf("failed to parse tunnel address (%s) of node %s: %w", a, n.Name, err)
			}
			c.recordInUse(ip, fmt.Sprintf("Node(%s)", n.Name))
			numNodeIPs++
		}
	}
	fmt.Fprintf(out, "Found %d node tunnel IPs.\n", numNodeIPs)
	fmt.Fprintln(out)
	return nil
}

// loadWorkloads records the workload endpoints' addresses as in use.
func (c *ipamChecker) loadWorkloads(ctx context.Context, s *ipamSession) error {
	fmt.Fprintln(c.out, "Loading all workload endpoints.")
	weps, _, err := s.client.List(ctx, datastore.ListOptions{Kind: v3.KindWorkloadEndpoint})
	if err != nil {
		return fmt.Errorf("failed to list workload endpoints: %w", err)
	}
	numWEPIPs := 0
	for _, r := range weps {
		w := r.(*v3.WorkloadEndpoint)
		for _, a := range w.Spec.IPNetworks {
			ip, err := normaliseIP(a)
			if err != nil {
				return fmt.Errorf("failed to parse IP (%s) of workload %s/%s: %w", a, w.Namespace, w.Name, err)
			}
			c.recordInUse(ip, fmt.Sprintf("Workload(%s/%s)", w.Namespace, w.Name))
			numWEPIPs++
		}
	}
	fmt.Fprintf(c.out, "Found %d workload IPs.\n", numWEPIPs)
	return nil
}

// scanNotInUse reports allocated addresses nothing uses (sticky
// reservations apart) and returns how many are leaked.
func (c *ipamChecker) scanNotInUse() int {
	out := c.out
	fmt.Fprintln(out, "Scanning for IPs that are allocated but not actually in use...")
	leaked, reserved, reservedIdle := 0, 0, 0
	for _, ip := range slices.SortedFunc(maps.Keys(c.allocations), netip.Addr.Compare) {
		if als := c.allocations[ip]; len(als) == 1 && als[0].Reserved != "" {
			reserved++
			if len(c.inUse[ip]) == 0 {
				reservedIdle++
				if c.showProblemIPs {
					fmt.Fprintf(out, "  %s reserved (%s) for %s/%s, used by no workload endpoint; attrs %s\n", ip, als[0].Reserved, als[0].Namespace, als[0].Pod, als[0].attrString())
				}
			}
			continue
		}
		if len(c.inUse[ip]) > 0 {
			continue
		}
		if c.showProblemIPs {
			for _, al := range c.allocations[ip] {
				fmt.Fprintf(out, "  %s leaked; attrs %s\n", ip, al.attrString())
			}
		}
		leaked++
	}
	fmt.Fprintf(out, "Found %d IPs that are allocated in IPAM but not actually in use.\n", leaked)
	if reserved > 0 {
		fmt.Fprintf(out, "Found %d sticky IPs reserved for their pods (ipReleasePolicy), %d of them used by no workload endpoint now (reserved, not leaked).\n", reserved, reservedIdle)
	}
	return leaked
}

// scanNotAllocated reports addresses in use that IPAM did not allocate
// (inside or outside the active pools) or that have more than one owner,
// and returns how many problems it found.
func (c *ipamChecker) scanNotAllocated(active []netip.Prefix) int {
	out := c.out
	fmt.Fprintln(out, "Scanning for IPs that are in use by a workload or node but not allocated in IPAM...")
	nonCalico, notAllocated, shared := 0, 0, 0
	for _, ip := range slices.SortedFunc(maps.Keys(c.inUse), netip.Addr.Compare) {
		owners := c.inUse[ip]
		if len(owners) > 1 {
			shared++
			if c.showProblemIPs {
				fmt.Fprintf(out, "  %s has multiple owners.\n", ip)
			}
		}
		if _, ok := c.allocations[ip]; ok {
			continue
		}
		if !slices.ContainsFunc(active, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			if c.showProblemIPs {
				for _, o := range owners {
					fmt.Fprintf(out, "  %s in use by %s is not in any active IP pool.\n", ip, o)
				}
			}
			nonCalico++
			continue
		}
		if c.showProblemIPs {
			for _, o := range owners {
				fmt.Fprintf(out, "  %s in use by %s and in active IPAM pool but has no IPAM allocation.\n", ip, o)
			}
		}
		notAllocated++
	}
	fmt.Fprintf(out, "Found %d in-use IPs that are not in active IP pools.\n", nonCalico)
	fmt.Fprintf(out, "Found %d in-use IPs that are in active IP pools but have no corresponding IPAM allocation.\n", notAllocated)
	fmt.Fprintf(out, "Found %d in-use IPs that have more than one owner.\n", shared)
	fmt.Fprintln(out)
	return nonCalico + notAllocated + shared
}

// scanHandles returns the stored handles no allocation names (leaked),
// and the set of every stored handle.
func (c *ipamChecker) scanHandles(handles []ipam.Handle) (leaked []checkHandle, stored map[string]bool) {
	out := c.out
	fmt.Fprintln(out, "Scanning for IPAM handles with no matching IPs...")
	good := 0
	stored = map[string]bool{}
	for _, h := range handles {
		stored[h.ID] = true
		if c.inUseHandles[h.ID] {
			good++
			continue
		}
		if c.showAllIPs {
			fmt.Fprintf(out, "  %s doesn't have any active IPs.\n", h.ID)
		}
		leaked = append(leaked, checkHandle{ID: h.ID, Revision: strconv.FormatInt(h.Revision, 10)})
	}
	fmt.Fprintf(out, "Found %d handles with no matching IPs (and %d handles with matches).\n", len(leaked), good)
	return leaked, stored
}

// scanMissingHandles reports handles allocations name that are not
// stored (not counted as problems, as in Calico).
func (c *ipamChecker) scanMissingHandles(stored map[string]bool) {
	fmt.Fprintln(c.out, "Scanning for IPs with missing handle...")
	missing := 0
	for _, h := range slices.Sorted(maps.Keys(c.inUseHandles)) {
		if stored[h] {
			continue
		}
		if c.showProblemIPs {
			fmt.Fprintf(c.out, "  %s is in use in a block but doesn't exist.\n", h)
		}
		missing++
	}
	fmt.Fprintf(c.out, "Found %d handles mentioned in blocks with no matching handle resource.\n", missing)
}

// writeReport writes rep, with every allocation, as JSON to path.
func (c *ipamChecker) writeReport(path string, rep checkReport) error {
	rep.Allocations = map[string][]*checkAllocation{}
	for ip, als := range c.allocations {
		rep.Allocations[ip.String()] = als
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	return nil
}

// recordAllocation notes one allocated address of block b.
func (c *ipamChecker) recordAllocation(b ipam.Block, al ipam.Allocation) {
	seq := al.SequenceNumber
	ca := &checkAllocation{IP: al.IP.String(), Handle: al.HandleID, SequenceNumber: &seq, Node: b.Host,
		Pod: al.Attrs["pod"], Namespace: al.Attrs["namespace"], Type: al.Attrs["type"],
		CreationTimestamp: al.Attrs["timestamp"], attrs: al.Attrs}
	if n := al.Attrs["node"]; n != "" {
		ca.Node = n
	}
	ca.Borrowed = ca.Node != b.Host
	if al.IsSticky() {
		ca.Reserved = al.Attrs[ipam.AttrReleasePolicy]
		ca.Borrowed = ca.Node != "" && ca.Node != b.Host
	}
	ca.lb = al.IsLoadBalancer()
	if al.HandleID != "" {
		c.inUseHandles[al.HandleID] = true
	}
	c.allocations[al.IP] = append(c.allocations[al.IP], ca)
	c.byNode[ca.Node]++
	if c.showAllIPs {
		fmt.Fprintf(c.out, "  %s allocated; attrs %s\n", al.IP, ca.attrString())
	}
}

// recordInUse notes that owner uses ip.
func (c *ipamChecker) recordInUse(ip netip.Addr, owner string) {
	if c.showAllIPs {
		fmt.Fprintf(c.out, "  %s belongs to %s\n", ip, owner)
	}
	c.inUse[ip] = append(c.inUse[ip], owner)
	for _, a := range c.allocations[ip] {
		a.InUse = true
		a.Owners = append(a.Owners, owner)
	}
}

// printTopNodes prints the nodes with the most allocations, as Calico.
func (c *ipamChecker) printTopNodes() {
	const numNodesToPrint = 20
	fmt.Fprintf(c.out, "Looking for top (up to %d) nodes by allocations...\n", numNodesToPrint)
	nodes := slices.SortedFunc(maps.Keys(c.byNode), func(x, y string) int {
		return cmp.Or(cmp.Compare(c.byNode[y], c.byNode[x]), cmp.Compare(x, y))
	})
	for i, n := range nodes {
		if i >= numNodesToPrint {
			break
		}
		fmt.Fprintf(c.out, "  %s has %d allocations\n", n, c.byNode[n])
	}
	if len(nodes) > 0 {
		fmt.Fprintf(c.out, "Node with most allocations has %d; median is %d\n", c.byNode[nodes[0]], c.byNode[nodes[len(nodes)/2]])
	}
	fmt.Fprintln(c.out)
}

// normaliseIP reads an address or a CIDR's address.
func normaliseIP(s string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap(), nil
}

// loadBalancerAllocations are the Services' LoadBalancer addresses.
func (c *ipamChecker) loadBalancerAllocations() []*checkAllocation {
	var out []*checkAllocation
	for _, ip := range slices.SortedFunc(maps.Keys(c.allocations), netip.Addr.Compare) {
		for _, al := range c.allocations[ip] {
			if al.lb {
				out = append(out, al)
			}
		}
	}
	return out
}

// checkLoadBalancerServices marks each LoadBalancer address in use by its
// Service when that Service exists (the same object: its handle names
// the Service's UID) and is still of type LoadBalancer; the others are
// left not in use, so they count as leaked, as Calico's check does. With
// no kubeconfig the Services cannot be read: the addresses are then
// taken as in use, never called leaked on a guess (a report's leaked
// addresses are what `ipam release --from-report` frees).
func (a *app) checkLoadBalancerServices(ctx context.Context, c *ipamChecker, lb []*checkAllocation, kubeconfig string) error {
	out := c.out
	fmt.Fprintln(out, "Loading all LoadBalancer Services.")
	if kubeconfig == "" {
		var err error
		if kubeconfig, err = apiconfig.Kubeconfig(a.configPath, a.env.Getenv); err != nil {
			return fmt.Errorf("Failed to create Calico API client: %w", err)
		}
	}
	owner := func(al *checkAllocation) string {
		return fmt.Sprintf("Service(%s/%s)", al.Namespace, al.attrs[ipam.AttrService])
	}
	if kubeconfig == "" {
		for _, al := range lb {
			c.recordInUse(netip.MustParseAddr(al.IP), owner(al))
		}
		fmt.Fprintf(out, "No kubeconfig (--kubeconfig, KUBECONFIG or kubeconfig in the calicoctl config): %d LoadBalancer IPs taken as in use by their Services, not checked.\n", len(lb))
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("connecting to the Kubernetes API of %s: %w", kubeconfig, err)
	}
	list, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("failed to list Services: %w", err)
	}
	want := map[string]bool{} // handles of the LoadBalancer Services
	for _, svc := range list.Items {
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.DeletionTimestamp == nil {
			want[ipam.LoadBalancerHandle(svc.Namespace, svc.Name, string(svc.UID))] = true
		}
	}
	used, gone := 0, 0
	for _, al := range lb {
		if !want[al.Handle] {
			gone++
			continue
		}
		c.recordInUse(netip.MustParseAddr(al.IP), owner(al))
		used++
	}
	fmt.Fprintf(out, "Found %d LoadBalancer Service IPs (and %d LoadBalancer IPs whose Service no longer exists or is no longer a LoadBalancer).\n", used, gone)
	return nil
}
