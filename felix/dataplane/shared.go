package dataplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// What the eBPF dataplane (felix/dataplane/bpf) shares with this one.

// HostInterfaces resolves host endpoints against the node's interfaces:
// expectedIPs to the interface holding one of them, and interfaceExclude.
type HostInterfaces struct{ hi *hostIfaces }

// NewHostInterfaces opens netlink in run's namespace.
func NewHostInterfaces(run *nsexec.Runner) (*HostInterfaces, error) {
	hi, err := newHostIfaces(run)
	if err != nil {
		return nil, err
	}
	return &HostInterfaces{hi: hi}, nil
}

// Configure takes a configuration's interfaceExclude.
func (h *HostInterfaces) Configure(cfg *calc.Config, logger *log.Entry) { h.hi.configure(cfg, logger) }

// Endpoints returns eps with the host endpoints named by expectedIPs given
// their interface (left out while none holds an address) and those on
// excluded interfaces left out.
func (h *HostInterfaces) Endpoints(eps map[calc.EndpointID]*calc.Endpoint) (map[calc.EndpointID]*calc.Endpoint, error) {
	return h.hi.endpoints(eps)
}

// Excludes reports whether interfaceExclude names the interface.
func (h *HostInterfaces) Excludes(name string) bool { return h.hi.exclude.excludes(name) }

// Close releases the netlink handle.
func (h *HostInterfaces) Close() { h.hi.close() }

// StatusFiles writes the endpoint status files of StatusDir.
type StatusFiles struct {
	s     statusFiles
	swept bool
}

// NewStatusFiles writes status files in dir ("" writes none).
func NewStatusFiles(dir string) *StatusFiles {
	return &StatusFiles{s: statusFiles{dir: dir, written: map[calc.EndpointID]string{}}}
}

// Programmed records that ep's policy is in the kernel.
func (f *StatusFiles) Programmed(ep *calc.Endpoint) error { return f.s.programmed(ep) }

// Removed deletes the file of an endpoint gone.
func (f *StatusFiles) Removed(id calc.EndpointID) error { return f.s.removed(id) }

// SweepOnce removes, the first time it is called, the files of workload
// endpoints not in known (left by an earlier felix).
func (f *StatusFiles) SweepOnce(known map[calc.EndpointID]*calc.Endpoint) error {
	if f.swept || f.s.dir == "" {
		return nil
	}
	f.swept = true
	entries, err := os.ReadDir(f.s.dir)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("endpoint status directory: %w", err)
	}
	keep := map[string]bool{}
	for id := range known {
		if id.Kind == calc.WorkloadEndpoint {
			keep[StatusFileName(id.Namespace, id.Name)] = true
		}
	}
	for _, e := range entries {
		if !keep[e.Name()] || strings.HasSuffix(e.Name(), ".tmp") {
			_ = os.Remove(filepath.Join(f.s.dir, e.Name()))
		}
	}
	return nil
}
