package status

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestServeAndFetch(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", SocketName)
	want := Report{NodeName: "node-a", PID: os.Getpid(), Backend: "gobgp", BGPRunning: true,
		Started: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC),
		Peers: []PeerStatus{
			{Address: "198.18.0.3", Type: PeerTypeMesh, State: PeerStateUp, Since: "10:00:01", Info: "Established"},
			{Address: "fd00::3", Type: PeerTypeGlobal, State: PeerStateStart, Since: "10:00:02", Info: "Active", IPv6: true},
		}}
	fail := false
	s, err := Listen(sock, func(context.Context) (Report, error) {
		if fail {
			return Report{}, errors.New("router gone")
		}
		return want, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Fetch(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Fetch = %+v, want %+v", got, want)
	}
	fail = true
	if _, err := Fetch(context.Background(), sock); err == nil || !strings.Contains(err.Error(), "router gone") {
		t.Errorf("Fetch of a failing source: err = %v, want it to carry the source's error", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket %s left after Close: %v", sock, err)
	}
	if _, err := Fetch(context.Background(), sock); err == nil {
		t.Error("Fetch after Close succeeded")
	}
	// A stale socket file from a dead agent is replaced.
	if err := os.WriteFile(sock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = Listen(sock, func(context.Context) (Report, error) { return want, nil }, nil)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	_ = s.Close()
}

func TestPIDFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), PIDFileName)
	if pid := RunningPID(path); pid != 0 {
		t.Fatalf("RunningPID of a missing file = %d", pid)
	}
	if err := ClaimPIDFile(path); err != nil {
		t.Fatal(err)
	}
	if pid := RunningPID(path); pid != os.Getpid() {
		t.Errorf("RunningPID = %d, want %d", pid, os.Getpid())
	}
	// Another live process holds it: claiming fails and names it.
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(path, []byte("12345678\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ClaimPIDFile(path); err != nil {
		t.Errorf("claiming a stale pid file: %v", err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := ClaimPIDFile(path)
	if !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Errorf("ClaimPIDFile over live pid %d: %v", cmd.Process.Pid, err)
	}
	// Once it dies (and is reaped), it is not alive.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if Alive(cmd.Process.Pid) {
		t.Errorf("pid %d alive after kill and wait", cmd.Process.Pid)
	}
	// A garbage file is an error for ReadPID, and not a running agent.
	_ = os.WriteFile(path, []byte("nope"), 0o644)
	if _, err := ReadPID(path); err == nil {
		t.Error("ReadPID of garbage succeeded")
	}
	ReleasePIDFile(path) // not ours: stays
	if _, err := os.Stat(path); err != nil {
		t.Errorf("ReleasePIDFile removed a file not naming this process")
	}
}

func TestFormatSince(t *testing.T) {
	now := time.Date(2024, 5, 1, 15, 0, 0, 0, time.Local)
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, ""},
		{time.Date(2024, 5, 1, 9, 8, 7, 0, time.Local), "09:08:07"},
		{time.Date(2024, 4, 30, 23, 0, 0, 0, time.Local), "2024-04-30"},
	} {
		if got := FormatSince(tc.t, now); got != tc.want {
			t.Errorf("FormatSince(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
}
