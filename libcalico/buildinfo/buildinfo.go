// Package buildinfo holds the version, git commit and build date stamped into
// every Palisade binary at link time with -ldflags -X.
package buildinfo

import (
	"fmt"
	"runtime"
	"strings"
)

// These are set by the Makefile through -ldflags "-X ...". A binary built
// without them (go run, go test) reports "dev" and "unknown".
var (
	Version   = "dev"
	GitCommit = "unknown"
	BuildDate = "unknown"
)

// Info is the stamped build information of the running binary.
type Info struct {
	Version   string `json:"version"`
	GitCommit string `json:"gitCommit"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
}

// Get returns the stamped build information.
func Get() Info {
	return Info{Version: Version, GitCommit: GitCommit, BuildDate: BuildDate, GoVersion: runtime.Version()}
}

// Lines renders the information as the aligned "Key: value" lines that each
// binary's `version` command prints. versionKey names the first line, for
// example "Client Version" for calicoctl or "Version" elsewhere.
func (i Info) Lines(versionKey string) string {
	return Table([][2]string{
		{versionKey, i.Version},
		{"Git commit", i.GitCommit},
		{"Build date", i.BuildDate},
		{"Go version", i.GoVersion},
	})
}

// Table aligns "Key: value" rows the way Calico's version output does.
func Table(rows [][2]string) string {
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%-*s %s\n", width+1, r[0]+":", r[1])
	}
	return b.String()
}
