// Package cmdline answers the human-facing invocations of the CNI binaries
// (`--help`, `version`) without pulling in any heavy dependency, so the
// binaries stay quick to start.
package cmdline

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/palisade-net/palisade/libcalico/buildinfo"
)

// Binary describes one CNI binary for its help text.
type Binary struct {
	Name    string
	Summary string
}

// HandleHuman answers `--help`, `-h`, `version`, `-v` and `--version` when
// the binary was started by a person rather than by a container runtime (no
// CNI_COMMAND in the environment). It reports whether it handled the call and
// the exit code to use.
func (b Binary) HandleHuman(args []string, out, errOut io.Writer) (handled bool, code int) {
	if os.Getenv("CNI_COMMAND") != "" {
		return false, 0
	}
	arg := ""
	if len(args) > 0 {
		arg = args[0]
	}
	switch arg {
	case "version", "-v", "--version":
		fmt.Fprint(out, buildinfo.Get().Lines("Version"))
		return true, 0
	case "--help", "-h", "help":
		fmt.Fprintf(out, "%s — %s\n\n", b.Name, b.Summary)
		fmt.Fprintf(out, "This is a CNI plugin: a container runtime runs it with CNI_COMMAND and the\n"+
			"network configuration on standard input.\n\nUsage:\n  %s version    print the version\n  %s --help     print this help\n", b.Name, b.Name)
		return true, 0
	default:
		// A runtime that forgot CNI_COMMAND reads the error document on
		// standard output; a person reads the hint on standard error.
		_ = json.NewEncoder(out).Encode(cniError{CNIVersion: "1.0.0", Code: errInvalidEnvironmentVariables,
			Msg: fmt.Sprintf("%s: the environment variable CNI_COMMAND is not set (want ADD, DEL, CHECK, GC, STATUS or VERSION)", b.Name)})
		fmt.Fprintf(errOut, "%s: CNI_COMMAND is not set and %q is not a known argument; try `%s --help`\n", b.Name, arg, b.Name)
		return true, 1
	}
}

// errInvalidEnvironmentVariables is the CNI error code for a missing or
// invalid CNI_* variable (types.ErrInvalidEnvironmentVariables, without
// importing the CNI library here).
const errInvalidEnvironmentVariables = 4

// cniError is the error document of the CNI specification.
type cniError struct {
	CNIVersion string `json:"cniVersion"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
}

// NotImplemented writes the CNI error document saying this build cannot yet
// perform CNI operations, and returns the exit code.
func (b Binary) NotImplemented(out io.Writer) int {
	_ = json.NewEncoder(out).Encode(cniError{CNIVersion: "1.0.0", Code: 999,
		Msg: fmt.Sprintf("%s: CNI operations are not implemented in this build", b.Name)})
	return 1
}
