package dataplane

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/libcalico/endpointstatus"
)

// EndpointStatus is the content of an endpoint status file, written once
// the endpoint's rules (its dispatch entry, its chains and every policy and
// IP set they use) are in the kernel and removed when the endpoint goes
// away; see libcalico/endpointstatus, which the CNI plugin reads it with.
type EndpointStatus = endpointstatus.Status

// StatusFileName is the file, under the status directory, of the
// WorkloadEndpoint namespace/name.
func StatusFileName(namespace, name string) string { return endpointstatus.FileName(namespace, name) }

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
	st := EndpointStatus{Endpoint: ep.ID.Namespace + "/" + ep.ID.Name, Interface: ep.InterfaceName, Status: endpointstatus.Up}
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
