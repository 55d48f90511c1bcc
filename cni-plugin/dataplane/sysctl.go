package dataplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// writeSysctl sets /proc/sys/<key> (key with "/" separators) in the
// calling thread's network namespace.
func writeSysctl(key, value string) error {
	path := filepath.Join("/proc/sys", key)
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// readSysctl reads /proc/sys/<key>.
func readSysctl(key string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", key))
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// hostSysctls are the settings of a host-side cali interface, as Calico
// makes them: it answers ARP for everything (the workload's gateway does
// not exist), at once, forwards, and for IPv6 forwards and answers
// neighbour solicitations too.
func hostSysctls(iface string, v4, v6 bool) [][2]string {
	var s [][2]string
	if v4 {
		s = append(s,
			[2]string{"net/ipv4/conf/" + iface + "/forwarding", "1"},
			[2]string{"net/ipv4/conf/" + iface + "/proxy_arp", "1"},
			[2]string{"net/ipv4/neigh/" + iface + "/proxy_delay", "0"},
		)
	}
	if v6 {
		s = append(s,
			[2]string{"net/ipv6/conf/" + iface + "/disable_ipv6", "0"},
			[2]string{"net/ipv6/conf/" + iface + "/accept_ra", "0"},
			[2]string{"net/ipv6/conf/" + iface + "/forwarding", "1"},
			[2]string{"net/ipv6/conf/" + iface + "/proxy_ndp", "1"},
		)
	}
	return s
}
