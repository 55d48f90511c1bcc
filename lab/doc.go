// Package lab builds a whole Palisade fabric on one machine out of network
// namespaces: a fabric namespace holding a bridge, node namespaces attached
// to it each running calico-node, an optional BIRD route reflector and
// border router, an optional external etcd or three-member etcd cluster
// (every etcd TLS with client certificates, reached through the lab's
// join file), and pods made by the real calico CNI plugin. Everything it
// creates carries the lab's prefix and is recorded in the lab's state
// directory, so Down removes it all, from this process or another one.
//
// The fabric, for a lab named "demo" with three nodes and a route
// reflector:
//
//	namespace pl-demo-fabric: bridge br0 (no address)
//	  ├─ pl-demo-node1  eth0 198.18.0.11/24  calico-node + embedded etcd
//	  ├─ pl-demo-node2  eth0 198.18.0.12/24  calico-node
//	  ├─ pl-demo-node3  eth0 198.18.0.13/24  calico-node
//	  ├─ pl-demo-rr     eth0 198.18.0.250/24 BIRD route reflector (AS 64512)
//	  ├─ pl-demo-border eth0 198.18.0.251/24 BIRD border router (AS 65001),
//	  │    ext0 198.19.0.1/24 ─ pl-demo-ext eth0 198.19.0.10/24 (a client outside)
//	  ├─ pl-demo-kube   eth0 198.18.0.252/24 Kubernetes control plane (option)
//	  ├─ pl-demo-etcd   eth0 198.18.0.253/24 external etcd (option)
//	  └─ pl-demo-etcd1…3 eth0 198.18.0.241-243/24 etcd cluster (option)
//	pods: pl-demo-pod-<namespace>.<pod>, eth0 from calico-ipam, a cali veth
//	into their node's namespace.
//
// With two subnets (Options.Subnets, for the VXLAN overlay's CrossSubnet
// and its backend without BGP), the even nodes move to a second bridge
// and a router joins the two:
//
//	namespace pl-demo-fabric: bridges br0 and br1
//	  br0 ├─ pl-demo-node1  eth0 198.18.0.11/24  (route 198.18.0.0/23 via .1)
//	      ├─ pl-demo-node3  eth0 198.18.0.13/24
//	      └─ pl-demo-router eth0 198.18.0.1/24   forwarding
//	  br1 ├─ pl-demo-node2  eth0 198.18.1.12/24  (route 198.18.0.0/23 via .1)
//	      └─ pl-demo-router eth1 198.18.1.1/24
//
// No namespace has a route out of the lab, and nothing is created in the
// machine's own namespace besides the namespaces and state files.
package lab
