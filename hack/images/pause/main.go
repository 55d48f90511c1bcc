// Command pause is the sandbox (infrastructure) container of a pod, as
// registry.k8s.io/pause is: it holds the pod's namespaces open by doing
// nothing until SIGINT or SIGTERM, and, being the PID namespace's init
// when the pod shares one, reaps every orphan handed to it so no zombie
// stays behind. No registry is reachable where Palisade is tested, so
// `make images` builds this image instead of pulling the upstream one.
package main

import (
	"fmt"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (palisade)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	// Separate channels: a burst of SIGCHLD must not crowd out SIGTERM
	// (a full channel drops signals). One pending SIGCHLD is enough, as
	// reap collects every child that has exited.
	down := make(chan os.Signal, 1)
	signal.Notify(down, unix.SIGINT, unix.SIGTERM)
	child := make(chan os.Signal, 1)
	signal.Notify(child, unix.SIGCHLD)
	for {
		select {
		case s := <-down:
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", s)
			os.Exit(0)
		case <-child:
			reap()
		}
	}
}

// reap waits for every child that has exited, without blocking.
func reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
