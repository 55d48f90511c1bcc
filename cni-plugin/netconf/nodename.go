package netconf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// NodeName is the node the workload runs on: the configuration's nodename,
// else the first line of the nodename file calico-node writes, else the
// host name (when the file is optional or absent at its default path).
func (c *NetConf) NodeName() (string, error) {
	if c.Nodename != "" {
		return c.Nodename, nil
	}
	path := c.NodenameFile
	if path == "" {
		path = os.Getenv(NodenameFileEnv)
	}
	explicit := path != ""
	if path == "" {
		path = DefaultNodenameFile
	}
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if name := strings.TrimSpace(string(data)); name != "" {
			return name, nil
		}
		return "", fmt.Errorf("nodename file %s is empty", path)
	case errors.Is(err, fs.ErrNotExist) && (!explicit || c.NodenameFileOptional):
		host, herr := os.Hostname()
		if herr != nil {
			return "", fmt.Errorf("no nodename file at %s and no host name: %w", path, herr)
		}
		return strings.ToLower(strings.TrimSpace(host)), nil
	default:
		return "", fmt.Errorf("reading nodename file: %w (is calico-node running on this host?)", err)
	}
}
