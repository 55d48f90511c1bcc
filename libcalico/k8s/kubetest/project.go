package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Project writes files into dir as the kubelet writes a projected volume
// (a ServiceAccount token, a Secret): into a new timestamped directory,
// then the symlink "..data" swapped to it by a rename, each file a symlink
// through "..data". Calling it again rotates them the way the kubelet
// does.
func Project(dir string, files map[string]string) error {
	ts := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	if err := os.MkdirAll(ts, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(data), 0o644); err != nil {
			return err
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "..data"))
}
