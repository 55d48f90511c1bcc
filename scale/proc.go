package scale

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// ProcRSSMiB is a process's resident set (VmRSS) in MiB.
func ProcRSSMiB(pid int) (float64, error) {
	return procStatusMiB(pid, "VmRSS:")
}

// ProcPeakRSSMiB is a process's peak resident set (VmHWM) in MiB.
func ProcPeakRSSMiB(pid int) (float64, error) {
	return procStatusMiB(pid, "VmHWM:")
}

func procStatusMiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the status of process %d: %w", pid, err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == field {
			kb, err := strconv.ParseFloat(string(f[1]), 64)
			if err != nil {
				return 0, fmt.Errorf("process %d: %s %q: %w", pid, field, f[1], err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("process %d: no %s in its status", pid, field)
}

// ProcCPUSeconds is the CPU time (user + system) a process has used.
func ProcCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the stat of process %d: %w", pid, err)
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("process %d: short stat %q", pid, s)
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	k, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("process %d: bad CPU times in %q", pid, s)
	}
	return (u + k) / clockTicks, nil
}
