package buildinfo

import "testing"

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
