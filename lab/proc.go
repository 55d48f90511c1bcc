package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is a process the lab started, identified by pid and start time so
// a later process never signals a stranger that reused the pid.
type Proc struct {
	// Name says what it is ("calico-node node2", "bird rr", "etcd").
	Name string `json:"name"`
	// NS is the namespace it runs in.
	NS string `json:"ns"`
	// PID and StartTime (clock ticks after boot, /proc/<pid>/stat field
	// 22) identify it.
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	// Log receives its standard output and error.
	Log string `json:"log"`
}

// procStat returns a process's state letter and start time.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	fields := strings.Fields(s[i+2:])
	// fields[0] is field 3 (state); start time is field 22.
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	return fields[0][0], start, err
}

// Alive says whether the recorded process still runs (not a zombie, and
// the pid not reused).
func (p Proc) Alive() bool {
	st, start, err := procStat(p.PID)
	return err == nil && start == p.StartTime && st != 'Z' && st != 'X'
}

// start runs argv in namespace ns, detached in its own session, with its
// output appended to logPath. It returns once the process has started;
// reaped, when it ends, by a goroutine of this process.
func start(ns, name, logPath string, argv, env []string) (Proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return Proc{}, fmt.Errorf("starting %s: %w", name, err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Proc{}, fmt.Errorf("starting %s: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := inNS(ns, cmd.Start); err != nil {
		return Proc{}, fmt.Errorf("starting %s (%s) in %s: %w", name, strings.Join(argv, " "), ns, err)
	}
	go func() { _ = cmd.Wait() }()
	p := Proc{Name: name, NS: ns, PID: cmd.Process.Pid, Log: logPath}
	if _, p.StartTime, err = procStat(p.PID); err != nil {
		_ = cmd.Process.Kill()
		return Proc{}, fmt.Errorf("starting %s: reading its start time: %w", name, err)
	}
	return p, nil
}

// Signal sends sig to the process if it is still the one recorded.
func (p Proc) Signal(sig syscall.Signal) error {
	if !p.Alive() {
		return fmt.Errorf("%s (pid %d) is not running", p.Name, p.PID)
	}
	return syscall.Kill(p.PID, sig)
}

// Stop ends the process: SIGTERM, then SIGKILL after grace. A process
// already gone is not an error.
func (p Proc) Stop(grace time.Duration) error {
	if !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s (pid %d): %w", p.Name, p.PID, err)
	}
	if p.wait(grace) {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	if !p.wait(5 * time.Second) {
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.PID)
	}
	return nil
}

// wait polls until the process is gone or d passes.
func (p Proc) wait(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for p.Alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// tail returns the last n bytes of a log file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
