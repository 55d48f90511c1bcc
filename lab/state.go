package lab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// stateFile is the lab's record of what it created, in its state directory.
const stateFile = "lab.json"

// Node is one node of the lab.
type Node struct {
	// Name is the Node resource name ("node1").
	Name string `json:"name"`
	// Index numbers it from 1; its address is 198.18.0.(10+Index).
	Index int `json:"index"`
	// NS is its network namespace.
	NS string `json:"ns"`
	// IP is its address on the fabric.
	IP netip.Addr `json:"ip"`
	// IP6 is its IPv6 address (Options.IPv6).
	IP6 netip.Addr `json:"ip6,omitzero"`
}

// Pod is one pod made by the calico CNI plugin.
type Pod struct {
	// Node is the node it runs on.
	Node string `json:"node"`
	// Namespace and Name are its Kubernetes identity.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// ContainerID is the sandbox's ID given to the CNI plugin.
	ContainerID string `json:"containerID"`
	// NS is its network namespace.
	NS string `json:"ns"`
	// IP is the address calico-ipam gave it.
	IP netip.Addr `json:"ip"`
	// IP6 is its IPv6 address (Options.IPv6).
	IP6 netip.Addr `json:"ip6,omitzero"`
	// Labels are the labels it was made with.
	Labels map[string]string `json:"labels,omitempty"`
	// Serve are the ports its server answers on.
	Serve []ServePort `json:"serve,omitempty"`
}

// Key is "namespace/name".
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

// state is what lab.json holds.
type state struct {
	Name    string    `json:"name"`
	Prefix  string    `json:"prefix"`
	Created time.Time `json:"created"`
	// Options are the settings the lab was made with (defaults filled).
	Options Options `json:"options"`
	// Peering is the current BGP topology (PeeringMesh, PeeringRR or
	// PeeringNodeRR).
	Peering string `json:"peering"`
	// Namespaces are every namespace created, in creation order.
	Namespaces []string `json:"namespaces"`
	// Procs are the processes started, by role ("calico-node/node1",
	// "bird/rr", "bird/border", "etcd").
	Procs map[string]Proc `json:"procs"`
	Nodes []Node          `json:"nodes"`
	Pods  []Pod           `json:"pods"`
	// NextIndex numbers the next node.
	NextIndex int `json:"nextIndex"`
}

// loadState reads a lab's state file.
func loadState(dir string) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("reading lab state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("lab state %s: %w", filepath.Join(dir, stateFile), err)
	}
	if st.Procs == nil {
		st.Procs = map[string]Proc{}
	}
	return &st, nil
}

// save writes the state file atomically.
func (st *state) save(dir string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing lab state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, stateFile)); err != nil {
		return fmt.Errorf("writing lab state: %w", err)
	}
	return nil
}
