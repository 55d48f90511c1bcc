package commands

import "fmt"

// ExitError ends calicoctl with Code after the command has printed all it
// had to say itself (for example "Calico process is not running." on
// standard output, as Calico prints it): main prints nothing more.
type ExitError struct {
	Code int
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }
