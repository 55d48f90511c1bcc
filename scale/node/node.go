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
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

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
	// the Go runtime's and the kernel's view) there at SIGTERM, and the
	// same as <node>.snap.* at each SIGUSR1 (the harness sends one when
	// it reads the process's memory). Heap samples are taken every 4 KiB
	// allocated instead of every 512 KiB.
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
		runtime.MemProfileRate = 4096
		stop, err := profile(ctx, dir, name)
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

// profile starts a CPU profile of the process into dir, and writes the
// heap profile and memory breakdown at each SIGUSR1 until ctx ends; the
// function it returns stops the CPU profile and writes them once more.
func profile(ctx context.Context, dir, name string) (func(), error) {
	cpu, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return nil, fmt.Errorf("profiling: %w", err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, fmt.Errorf("profiling: %w", err)
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(usr1)
		for {
			select {
			case <-ctx.Done():
				return
			case <-usr1:
				memProfile(dir, name+".snap")
			}
		}
	}()
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		memProfile(dir, name)
	}, nil
}

// memProfile writes the heap profile, the goroutines and the memory
// breakdown as <name>.heap.pprof, <name>.goroutines.txt and
// <name>.mem.txt in dir.
func memProfile(dir, name string) {
	if f, err := os.Create(filepath.Join(dir, name+".goroutines.txt")); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(f, 1)
		f.Close()
	}
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
}
