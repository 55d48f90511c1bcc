package nstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/palisade-net/palisade/felix/dataplane/nsexec"
)

// TestEchoServesFavoured checks that the echo process's thread serving
// a connection runs at nice -20 (favour), so that on a
// busy machine the request/response rate is the path's, not the
// scheduler's.
func TestEchoServesFavoured(t *testing.T) {
	RequireRoot(t)
	ns := New(t, Prefix(), "rr")
	run, err := nsexec.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	e, err := StartEcho(run, "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// One exchange: the echo's serving thread is running once it answered.
	var c int
	err = run.Do(func() error {
		var err error
		if c, err = dial(&unix.SockaddrInet4{Port: 8080, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		if err := writeAll(c, []byte{'x'}); err != nil {
			return err
		}
		buf := []byte{0}
		_, err = unix.Read(c, buf)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(c)
	nices, err := threadNices(e.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nices {
		if n == -20 {
			return
		}
	}
	t.Fatalf("no thread of the echo process at nice -20: %v", nices)
}

// threadNices are the nice values of a process's threads, by thread id.
func threadNices(pid int) (map[int]int, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil {
		return nil, err
	}
	nices := map[int]int{}
	for _, p := range stats {
		tid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		// After the command's name in parentheses: state is field 3,
		// nice field 19.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 17 {
			return nil, fmt.Errorf("%s: %q: too few fields", p, b)
		}
		n, err := strconv.Atoi(f[16])
		if err != nil {
			return nil, fmt.Errorf("%s: nice: %w", p, err)
		}
		nices[tid] = n
	}
	return nices, nil
}
