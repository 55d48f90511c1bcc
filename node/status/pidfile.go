package status

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrRunning means a live agent holds the pid file.
var ErrRunning = errors.New("calico-node is already running")

// ReadPID returns the pid recorded at path (0 when the file is absent).
func ReadPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", path, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: %q is not a pid", path, strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// Alive says whether pid is a running (not zombie) process.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// RunningPID returns the pid recorded at path when that process is alive,
// else 0.
func RunningPID(path string) int {
	pid, err := ReadPID(path)
	if err != nil || !Alive(pid) {
		return 0
	}
	return pid
}

// ClaimPIDFile writes this process's pid to path unless a live process
// already holds it (ErrRunning, naming it). A stale file is replaced.
func ClaimPIDFile(path string) error {
	if pid := RunningPID(path); pid != 0 && pid != os.Getpid() {
		return fmt.Errorf("%w (pid %d, from %s)", ErrRunning, pid, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	f, err := os.OpenFile(path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	_, werr := fmt.Fprintf(f, "%d\n", os.Getpid())
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("pid file %s: %w", path, werr)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	return nil
}

// ReleasePIDFile removes path if it still names this process.
func ReleasePIDFile(path string) {
	if pid, err := ReadPID(path); err == nil && pid == os.Getpid() {
		_ = os.Remove(path)
	}
}
