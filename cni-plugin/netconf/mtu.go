package netconf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MTUFileName is the file, beside the nodename file, where calico-node's
// felix writes the pod MTU: the host MTU less the VXLAN overhead when a
// VXLAN pool is enabled (/var/lib/calico/mtu, as Calico's).
const MTUFileName = "mtu"

// fileMTU is the MTU a configuration without mtu gets: the one in the MTU
// file beside the nodename file, else DefaultMTU.
func (c *NetConf) fileMTU() (int, error) {
	path := c.NodenameFile
	if path == "" {
		path = os.Getenv(NodenameFileEnv)
	}
	if path == "" {
		path = DefaultNodenameFile
	}
	path = filepath.Join(filepath.Dir(path), MTUFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return DefaultMTU, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the MTU file: %w", err)
	}
	mtu, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || mtu <= 0 {
		return 0, fmt.Errorf("MTU file %s holds %q, not a positive number", path, strings.TrimSpace(string(data)))
	}
	return mtu, nil
}
