// Command benchtable runs `go test -bench` (the command given after --),
// passes its output through, and ends with one table of every benchmark's
// metrics. Benchmarks report their ratio against a reference measured in the
// same run as a metric whose unit ends in "/ref" (for example "x/ref").
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
)

// row is one benchmark result line.
type row struct {
	name    string
	metrics []string
}

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: usage: benchtable -- go test -bench . ./...")
		os.Exit(2)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	rows := parse(io.TeeReader(stdout, os.Stdout))
	runErr := cmd.Wait()
	printTable(os.Stdout, rows)
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "benchtable: benchmarks failed:", runErr)
		os.Exit(1)
	}
}

// parse reads go test output and returns the benchmark result lines.
func parse(r io.Reader) []row {
	var rows []row
	pkg, pending := "", ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "pkg:" {
			pkg = f[1][strings.LastIndex(f[1], "/")+1:]
			continue
		}
		if len(f) > 0 && strings.HasPrefix(f[0], "Benchmark") {
			// A benchmark's log output may split its name from its
			// figures: remember the name until the figures come.
			pending = pkg + "." + strings.TrimPrefix(f[0], "Benchmark")
			f = f[1:]
		}
		if pending == "" || len(f) < 3 || !isCount(f[0]) {
			continue
		}
		var metrics []string
		for i := 1; i+1 < len(f); i += 2 {
			metrics = append(metrics, f[i]+" "+f[i+1])
		}
		rows = append(rows, row{name: pending, metrics: metrics})
		pending = ""
	}
	return rows
}

// isCount reports whether s is a benchmark's iteration count.
func isCount(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "\n== Palisade benchmarks (ratios are against a reference measured in the same run) ==")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "BENCHMARK\tRATIO\tMETRICS")
	for _, r := range rows {
		ratio := "-"
		var rest []string
		for _, m := range r.metrics {
			if strings.HasSuffix(m, "/ref") {
				ratio = m
				continue
			}
			rest = append(rest, m)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.name, ratio, strings.Join(rest, ", "))
	}
	tw.Flush()
}
