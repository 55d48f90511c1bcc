// Package goruntime sets the Go runtime's collector target, soft memory
// limit and processor count from FelixConfiguration's goGCThreshold,
// goMemoryLimitMB and goMaxProcs, as Calico's felix does at start: the
// GOGC, GOMEMLIMIT and GOMAXPROCS environment variables, when set, win.
// calico-node runs felix and its BGP speaker in one process, so the
// settings are the whole process's.
package goruntime

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"

	log "github.com/sirupsen/logrus"
)

// DefaultGCThreshold is goGCThreshold's default, Calico's.
const DefaultGCThreshold = 40

// Settings are the three fields, resolved: GCThreshold -1 turns the
// collector off, MemoryLimitMB -1 means no limit, MaxProcs ≤ 0 the
// runtime's default.
type Settings struct {
	GCThreshold   int
	MemoryLimitMB int
	MaxProcs      int
}

// FromSpec resolves the fields as FelixConfiguration holds them (nil:
// unset) with Calico's defaults: 40, -1, -1.
func FromSpec(gcThreshold, memoryLimitMB, maxProcs *int) Settings {
	s := Settings{GCThreshold: DefaultGCThreshold, MemoryLimitMB: -1, MaxProcs: -1}
	if gcThreshold != nil {
		s.GCThreshold = *gcThreshold
	}
	if memoryLimitMB != nil {
		s.MemoryLimitMB = *memoryLimitMB
	}
	if maxProcs != nil {
		s.MaxProcs = *maxProcs
	}
	return s
}

// Applier applies Settings to the process each time they change.
type Applier struct {
	// Getenv reads the environment (nil: os.Getenv; tests give their own).
	Getenv  func(string) string
	applied *Settings
}

// Apply sets what the environment leaves to the configuration and logs
// what it set; settings equal to the last applied do nothing.
func (a *Applier) Apply(s Settings, logger *log.Entry) {
	if a.applied != nil && *a.applied == s {
		return
	}
	first := a.applied == nil
	if a.Getenv == nil {
		a.Getenv = os.Getenv
	}
	a.applied = &s
	gcOff := s.GCThreshold < 0
	if v := a.Getenv("GOGC"); v == "" {
		debug.SetGCPercent(s.GCThreshold)
		logger.WithField("goGCThreshold", s.GCThreshold).Info("Go collector target set from the configuration")
	} else {
		gcOff = v == "off"
		if first {
			logger.WithField("GOGC", v).Info("GOGC is set: goGCThreshold is not applied")
		}
	}
	if v := a.Getenv("GOMEMLIMIT"); v == "" {
		limit := int64(math.MaxInt64)
		if s.MemoryLimitMB >= 0 {
			limit = int64(s.MemoryLimitMB) << 20
		}
		debug.SetMemoryLimit(limit)
		logger.WithField("goMemoryLimitMB", s.MemoryLimitMB).Info("Go soft memory limit set from the configuration")
		if gcOff && s.MemoryLimitMB < 0 {
			logger.Warn("The Go collector is off (goGCThreshold -1) and no memory limit is set (goMemoryLimitMB): memory will grow until the process is killed")
		}
	} else if first {
		logger.WithField("GOMEMLIMIT", v).Info("GOMEMLIMIT is set: goMemoryLimitMB is not applied")
	}
	if v := a.Getenv("GOMAXPROCS"); v == "" {
		if s.MaxProcs > 0 {
			runtime.GOMAXPROCS(s.MaxProcs)
		} else {
			runtime.SetDefaultGOMAXPROCS()
		}
		logger.WithFields(log.Fields{"goMaxProcs": s.MaxProcs, "GOMAXPROCS": runtime.GOMAXPROCS(0)}).Info("Go processor count set from the configuration")
	} else if first {
		logger.WithField("GOMAXPROCS", v).Info("GOMAXPROCS is set: goMaxProcs is not applied")
	}
}
