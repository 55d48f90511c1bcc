package startup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Sysctl writes kernel parameters.
type Sysctl interface {
	// Set writes value to the parameter name ("net.ipv4.ip_forward").
	Set(name, value string) error
}

// ProcSysctl writes under /proc/sys (or Root, for tests), in the network
// namespace of the calling thread.
type ProcSysctl struct {
	Root string
}

// Set implements Sysctl.
func (s ProcSysctl) Set(name, value string) error {
	root := s.Root
	if root == "" {
		root = "/proc/sys"
	}
	path := filepath.Join(root, strings.ReplaceAll(name, ".", "/"))
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting %s=%s: %w", name, value, err)
	}
	return nil
}

// forwardingSysctls are the parameters a node routing workload traffic
// needs.
func forwardingSysctls(v4, v6 bool) [][2]string {
	var out [][2]string
	if v4 {
		out = append(out, [2]string{"net.ipv4.ip_forward", "1"})
	}
	if v6 {
		out = append(out, [2]string{"net.ipv6.conf.all.forwarding", "1"})
	}
	return out
}
