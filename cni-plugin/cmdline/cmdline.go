// Package cmdline answers the human-facing invocations of the CNI binaries
// (`--help`, `version`) without pulling in any heavy dependency, so the
// binaries stay quick to start.
package cmdline

import (
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
		// standard output (code 4: a missing or invalid CNI_* variable);
		// a person reads the hint on standard error.
		fmt.Fprintf(out, "{\"cniVersion\":\"1.0.0\",\"code\":4,\"msg\":%q}\n",
			b.Name+": the environment variable CNI_COMMAND is not set (want ADD, DEL, CHECK, GC, STATUS or VERSION)")
		fmt.Fprintf(errOut, "%s: CNI_COMMAND is not set and %q is not a known argument; try `%s --help`\n", b.Name, arg, b.Name)
		return true, 1
	}
}
