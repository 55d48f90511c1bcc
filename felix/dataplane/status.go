package dataplane

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
)

// EndpointStatus is the content of an endpoint status file: felix writes
// it once the endpoint's rules (its dispatch entry, its chains and every
// policy and IP set they use) are in the kernel, and removes it when the
// endpoint goes away. The CNI plugin waits for it (Calico's policy setup
// timeout) so a new pod sends nothing before its policy is enforced.
type EndpointStatus struct {
	// Endpoint is "<namespace>/<name>" of the WorkloadEndpoint.
	Endpoint  string `json:"endpoint"`
	Interface string `json:"interface"`
	// Addresses are the endpoint's addresses as programmed: a waiter can
	// tell the file of a pod that reused a name from its own.
	Addresses []string `json:"addresses"`
	// Status is "up" once programmed.
	Status     string    `json:"status"`
	Programmed time.Time `json:"programmed"`
}

// StatusFileName is the file, under the status directory, of the
// WorkloadEndpoint namespace/name: "<namespace>.<name>" (a namespace has no
// dots, so the first dot splits it).
func StatusFileName(namespace, name string) string { return namespace + "." + name }

// statusFiles writes and removes endpoint status files in one directory.
type statusFiles struct {
	dir     string
	written map[calc.EndpointID]string // id → content written
}

func (s *statusFiles) fileOf(id calc.EndpointID) string {
	return filepath.Join(s.dir, StatusFileName(id.Namespace, id.Name))
}

// programmed records that ep's rules are in the kernel.
func (s *statusFiles) programmed(ep *calc.Endpoint) error {
	if s.dir == "" || ep.ID.Kind != calc.WorkloadEndpoint {
		return nil
	}
	st := EndpointStatus{Endpoint: ep.ID.Namespace + "/" + ep.ID.Name, Interface: ep.InterfaceName, Status: "up"}
	for _, p := range ep.IPv4Nets {
		st.Addresses = append(st.Addresses, p.String())
	}
	for _, p := range ep.IPv6Nets {
		st.Addresses = append(st.Addresses, p.String())
	}
	key, _ := json.Marshal(st)
	if s.written[ep.ID] == string(key) {
		return nil
	}
	st.Programmed = time.Now().UTC()
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("endpoint status directory: %w", err)
	}
	path := s.fileOf(ep.ID)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("endpoint status %s: %w", ep.ID, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("endpoint status %s: %w", ep.ID, err)
	}
	s.written[ep.ID] = string(key)
	return nil
}

// removed deletes the status file of an endpoint that went away.
func (s *statusFiles) removed(id calc.EndpointID) error {
	if s.dir == "" || id.Kind != calc.WorkloadEndpoint {
		return nil
	}
	delete(s.written, id)
	if err := os.Remove(s.fileOf(id)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("endpoint status %s: %w", id, err)
	}
	return nil
}
