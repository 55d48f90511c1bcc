// Package endpointstatus is the contract between felix and the CNI plugin
// about a workload's policy being programmed: felix writes one small JSON
// file per WorkloadEndpoint once the endpoint's rules are in the kernel,
// and the CNI plugin can wait for it before it returns (Calico's policy
// setup timeout), so a new pod sends nothing before its policy holds.
package endpointstatus

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// DirName is the status directory's name under calico-node's run
// directory; DefaultDir is where it is unless the run directory is moved.
const (
	DirName    = "endpoint-status"
	DefaultDir = "/var/run/calico/" + DirName
)

// Up is the Status of a programmed endpoint.
const Up = "up"

// Status is the content of an endpoint status file.
type Status struct {
	// Endpoint is "<namespace>/<name>" of the WorkloadEndpoint.
	Endpoint  string `json:"endpoint"`
	Interface string `json:"interface"`
	// Addresses are the endpoint's addresses as programmed (CIDRs): a
	// waiter can tell the file of a pod that reused a name from its own.
	Addresses []string `json:"addresses"`
	// Status is Up once programmed.
	Status     string    `json:"status"`
	Programmed time.Time `json:"programmed"`
}

// FileName is the file, under the status directory, of the
// WorkloadEndpoint namespace/name: "<namespace>.<name>" (a namespace has no
// dots, so the first dot splits it).
func FileName(namespace, name string) string { return namespace + "." + name }

// Read reads the status file of namespace/name in dir.
func Read(dir, namespace, name string) (Status, error) {
	var st Status
	data, err := os.ReadFile(filepath.Join(dir, FileName(namespace, name)))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("endpoint status %s/%s: %w", namespace, name, err)
	}
	return st, nil
}

// Covers reports whether the status is Up and lists every address in
// addrs, so it describes this incarnation of the endpoint.
func (s Status) Covers(addrs []netip.Addr) bool {
	if s.Status != Up {
		return false
	}
	have := map[netip.Addr]bool{}
	for _, a := range s.Addresses {
		if p, err := netip.ParsePrefix(a); err == nil {
			have[p.Addr()] = true
		} else if ip, err := netip.ParseAddr(a); err == nil {
			have[ip] = true
		}
	}
	for _, a := range addrs {
		if !have[a] {
			return false
		}
	}
	return true
}
