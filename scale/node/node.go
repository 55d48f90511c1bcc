// Package node runs one node's BGP part (node/bgp, as calico-node runs
// it, without kernel routes) for the scale harness, in a process of its
// own, configured by the environment. It imports nothing else of the
// harness, so that the scale-node binary holds the BGP part only and its
// memory is what the reflector measurement reports.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/node/bgp"
)

// The environment a node process reads.
const (
	// NameEnv is the Node's name; EtcdEnv the etcd endpoints, comma
	// separated.
	NameEnv = "PALISADE_SCALE_NODE"
	EtcdEnv = "PALISADE_SCALE_ETCD"
	// LogEnv sets the log level (warn when unset).
	LogEnv = "PALISADE_SCALE_NODE_LOG"
	// ProfileEnv names a directory: the process writes its CPU profile
	// (<node>.cpu.pprof, from start to SIGTERM), heap profile
	// (<node>.heap.pprof) and what its memory is made of (<node>.mem.txt:
	// the Go runtime's and the kernel's view) there at SIGTERM.
	ProfileEnv = "PALISADE_SCALE_PPROF"
)

// Run runs the node's BGP part until ctx ends.
func Run(ctx context.Context) error {
	name := os.Getenv(NameEnv)
	log.SetLevel(log.WarnLevel)
	if l, err := log.ParseLevel(os.Getenv(LogEnv)); err == nil {
		log.SetLevel(l)
	}
	st, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: strings.Split(os.Getenv(EtcdEnv), ",")})
	if err != nil {
		return err
	}
	defer st.Close()
	if dir := os.Getenv(ProfileEnv); dir != "" {
		stop, err := profile(dir, name)
		if err != nil {
			return err
		}
		// Written as soon as SIGTERM comes, whether or not the speaker
		// is quick to return.
		written := make(chan struct{})
		go func() { <-ctx.Done(); stop(); close(written) }()
		defer func() { <-written }()
	}
	return bgp.Run(ctx, bgp.Config{NodeName: name, Store: st, KV: st.KV(), DisableKernelRoutes: true})
}

// profile starts a CPU profile of the process into dir; the function it
// returns stops it and writes the heap profile and memory breakdown.
func profile(dir, name string) (func(), error) {
	cpu, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return nil, fmt.Errorf("profiling: %w", err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, fmt.Errorf("profiling: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		if f, err := os.Create(filepath.Join(dir, name+".heap.pprof")); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		smaps, _ := os.ReadFile("/proc/self/smaps_rollup")
		mem := fmt.Sprintf("HeapAlloc %d\nHeapInuse %d\nHeapIdle-Released %d\nStackInuse %d\nMSpan+MCache+Buck+GC+Other %d\nGoroutines %d\n\n%s",
			ms.HeapAlloc, ms.HeapInuse, ms.HeapIdle-ms.HeapReleased, ms.StackInuse,
			ms.MSpanInuse+ms.MCacheInuse+ms.BuckHashSys+ms.GCSys+ms.OtherSys, runtime.NumGoroutine(), smaps)
		_ = os.WriteFile(filepath.Join(dir, name+".mem.txt"), []byte(mem), 0o644)
	}, nil
}
