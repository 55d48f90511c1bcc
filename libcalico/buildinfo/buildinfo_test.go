package buildinfo

import (
	"bytes"
	"io"
	"testing"
)

func TestLinesAlignsKeys(t *testing.T) {
	i := Info{Version: "v1.2.3", GitCommit: "abc123", BuildDate: "2026-11-30T00:00:00Z", GoVersion: "go1.26.8"}
	want := "Client Version: v1.2.3\n" +
		"Git commit:     abc123\n" +
		"Build date:     2026-11-30T00:00:00Z\n" +
		"Go version:     go1.26.8\n"
	if got := i.Lines("Client Version"); got != want {
		t.Fatalf("Lines:\n%s\nwant:\n%s", got, want)
	}
}

// TestCommandPrintsLines: the version subcommand the binaries share
// prints the Version-first lines of the running binary to the command's
// output (cobra's Print: stderr unless one is set), and refuses arguments.
func TestCommandPrintsLines(t *testing.T) {
	var out bytes.Buffer
	cmd := Command()
	cmd.SetOut(&out)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("version: %v", err)
	}
	if want := Get().Lines("Version"); out.String() != want {
		t.Fatalf("version printed:\n%s\nwant:\n%s", out.String(), want)
	}
	cmd = Command()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"extra"})
	if err := cmd.Execute(); err == nil {
		t.Fatal("version extra: no error")
	}
}
