// Command scale runs the scale harness (package scale) at the cluster
// sizes given and prints one table; with -out it also writes the table
// (results.md) and the plots (PNG) there, which docs/scale.md shows.
// The BGP measurements need root (a network namespace of their own).
//
//	scale -sizes 100,250,500,1000 -out docs/scale
//
//go:debug multipathtcp=0
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/scale"
)

func main() {
	scale.RunRole()
	sizes := flag.String("sizes", "100,250,500,1000", "cluster sizes, comma separated")
	calcExtra := flag.String("calc-sizes", "2000,5000", "more sizes for the calculation graph alone (cheap), comma separated")
	phases := flag.String("phases", "calc,fanout,fanoutcache,fanout3,bgp,ipam", "measurements to run, in order")
	out := flag.String("out", "", "directory for results.md and the plots (none when empty)")
	max3 := flag.Int("fanout3-max", 500, "largest size the 3-member etcd fan-out runs at (it costs as much again as the 1-member one)")
	perCache := flag.Int("cache-agents", 500, "agents per fan-out cache in the fanoutcache phase")
	lock := flag.String("lock", "", "file to flock while the BGP measurements run in their network namespace (the machine's kernel-test lock)")
	flag.Parse()
	// Errors only: the thousands of agents say "listing failed" as they
	// stop, which is how a size ends, not news.
	log.SetLevel(log.ErrorLevel)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	if err := run(ctx, *sizes, *calcExtra, *phases, *out, *lock, *max3, *perCache); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			return nil, fmt.Errorf("size %q: want a whole number of nodes ≥ 2", f)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func run(ctx context.Context, sizesFlag, calcFlag, phases, out, lock string, max3, perCache int) error {
	sizes, err := parseSizes(sizesFlag)
	if err != nil {
		return err
	}
	extra, err := parseSizes(calcFlag)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "palisade-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	began := time.Now()
	var series []scale.Series
	step := func(name string, f func() ([]scale.Series, error)) error {
		start := time.Now()
		fmt.Fprintf(os.Stderr, "scale: %s at %v ...\n", name, sizes)
		ss, err := f()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(os.Stderr, "scale: %s done in %s\n", name, time.Since(start).Round(time.Second))
		series = append(series, ss...)
		return nil
	}
	one := func(s scale.Series, err error) ([]scale.Series, error) { return []scale.Series{s}, err }
	fanCluster := scale.Cluster{PodsPerNode: 3, Namespaces: 50, Policies: 200}
	for _, ph := range strings.Split(phases, ",") {
		var err error
		switch ph {
		case "":
			// No measurement: -phases "" rewrites the report from the
			// series saved in -out.
		case "calc":
			all := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(sizes), extra...))))
			err = step(ph, func() ([]scale.Series, error) { return one(scale.CalcGraph(all, scale.CalcSetup, 200)) })
		case "fanout", "fanout3":
			members, at := 1, sizes
			if ph == "fanout3" {
				members = 3
				at = slices.DeleteFunc(slices.Clone(sizes), func(n int) bool { return n > max3 })
			}
			err = step(ph, func() ([]scale.Series, error) {
				return one(scale.FanOut(ctx, at, scale.FanOutConfig{Members: members, Cluster: fanCluster, Changes: 5, Dir: dir}))
			})
		case "fanoutcache":
			err = step(ph, func() ([]scale.Series, error) {
				return one(scale.FanOut(ctx, sizes, scale.FanOutConfig{Members: 1, Cluster: fanCluster, Changes: 5, Dir: dir, AgentsPerCache: perCache}))
			})
		case "bgp":
			err = step(ph, func() ([]scale.Series, error) { return scale.BGP(ctx, sizes, scale.BGPParts, dir, lock) })
		case "reflector", "mesh", "bgp-reads":
			err = step(ph, func() ([]scale.Series, error) { return scale.BGP(ctx, sizes, []string{ph}, dir, lock) })
		case "ipam":
			err = step(ph, func() ([]scale.Series, error) { return one(scale.IPAMStorm(ctx, sizes, dir)) })
		default:
			err = fmt.Errorf("unknown phase %q (calc, fanout, fanoutcache, fanout3, bgp, ipam; or one part of bgp: reflector, mesh, bgp-reads)", ph)
		}
		if err != nil {
			return err
		}
	}
	stamp := fmt.Sprintf("measured %s on %d CPUs shared with other work, in %s", time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		runtime.NumCPU(), time.Since(began).Round(time.Second))
	for i := range series {
		series[i].Notes = append(series[i].Notes, series[i].Name+": "+stamp)
	}
	var table bytes.Buffer
	scale.WriteTable(&table, series)
	os.Stdout.Write(table.Bytes())
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	// Each series is kept as JSON, so phases run apart (make scale
	// PHASES=bgp) replace theirs and the table and plots show them all.
	if series, err = scale.SaveSeries(out, series); err != nil {
		return err
	}
	table.Reset()
	fmt.Fprintf(&table, "Generated by `make scale` (scale/cmd/scale); each series says when it was measured. Ratios against BIRD are from the same run.\n\n")
	scale.WriteTable(&table, series)
	if err := os.WriteFile(filepath.Join(out, "results.md"), table.Bytes(), 0o644); err != nil {
		return err
	}
	files, err := scale.WritePlots(out, series)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "scale: wrote %s and %d plots\n", filepath.Join(out, "results.md"), len(files))
	return nil
}
