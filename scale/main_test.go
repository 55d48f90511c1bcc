package scale

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as the harness's child processes
// (RunRole), as the command's binary does.
func TestMain(m *testing.M) {
	RunRole()
	os.Exit(m.Run())
}
