package goruntime

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"

	log "github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// current reads the collector target and memory limit without changing
// them.
func current() (gc int, limit int64) {
	gc = debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	return gc, debug.SetMemoryLimit(-1)
}

func restore(t *testing.T) {
	gc, limit := current()
	procs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
		runtime.GOMAXPROCS(procs)
	})
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestFromSpecDefaults(t *testing.T) {
	if got, want := FromSpec(nil, nil, nil), (Settings{40, -1, -1}); got != want {
		t.Errorf("defaults: %+v, want %+v (Calico's)", got, want)
	}
	gc, mem, procs := 20, 512, 1
	if got, want := FromSpec(&gc, &mem, &procs), (Settings{20, 512, 1}); got != want {
		t.Errorf("set: %+v, want %+v", got, want)
	}
}

// TestApply: the process's runtime follows the settings, back to the
// defaults when they go, and leaves alone what the environment sets.
func TestApply(t *testing.T) {
	restore(t)
	logger, hook := test.NewNullLogger()
	a := &Applier{Getenv: env(nil)}

	a.Apply(FromSpec(nil, nil, nil), log.NewEntry(logger))
	if gc, limit := current(); gc != 40 || limit != math.MaxInt64 {
		t.Errorf("defaults applied: GOGC %d, limit %d; want 40, none", gc, limit)
	}
	a.Apply(Settings{GCThreshold: 70, MemoryLimitMB: 300, MaxProcs: 1}, log.NewEntry(logger))
	if gc, limit := current(); gc != 70 || limit != 300<<20 || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("set: GOGC %d, limit %d, GOMAXPROCS %d; want 70, 300 MiB, 1", gc, limit, runtime.GOMAXPROCS(0))
	}
	hook.Reset()
	a.Apply(Settings{GCThreshold: 70, MemoryLimitMB: 300, MaxProcs: 1}, log.NewEntry(logger))
	if n := len(hook.AllEntries()); n != 0 {
		t.Errorf("the same settings again logged %d lines, want none", n)
	}
	a.Apply(FromSpec(nil, nil, nil), log.NewEntry(logger))
	if gc, limit := current(); gc != 40 || limit != math.MaxInt64 {
		t.Errorf("back to defaults: GOGC %d, limit %d; want 40, none", gc, limit)
	}
	if runtime.GOMAXPROCS(0) == 1 && runtime.NumCPU() > 1 {
		t.Errorf("goMaxProcs unset again: GOMAXPROCS stayed 1 on %d CPUs", runtime.NumCPU())
	}

	hook.Reset()
	a.Apply(Settings{GCThreshold: -1, MemoryLimitMB: -1}, log.NewEntry(logger))
	if gc, _ := current(); gc != -1 {
		t.Errorf("goGCThreshold -1: GOGC %d, want off", gc)
	}
	warned := false
	for _, e := range hook.AllEntries() {
		warned = warned || e.Level == log.WarnLevel
	}
	if !warned {
		t.Error("collector off without a memory limit: no warning")
	}
}

// TestApplyEnvironmentWins: GOGC, GOMEMLIMIT and GOMAXPROCS set in the
// environment keep the runtime as they made it.
func TestApplyEnvironmentWins(t *testing.T) {
	restore(t)
	debug.SetGCPercent(55)
	debug.SetMemoryLimit(100 << 20)
	runtime.GOMAXPROCS(1)
	a := &Applier{Getenv: env(map[string]string{"GOGC": "55", "GOMEMLIMIT": "100MiB", "GOMAXPROCS": "1"})}
	logger, _ := test.NewNullLogger()
	a.Apply(Settings{GCThreshold: 70, MemoryLimitMB: 300, MaxProcs: 2}, log.NewEntry(logger))
	if gc, limit := current(); gc != 55 || limit != 100<<20 || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("environment set: GOGC %d, limit %d, GOMAXPROCS %d; want 55, 100 MiB, 1 kept", gc, limit, runtime.GOMAXPROCS(0))
	}
}
