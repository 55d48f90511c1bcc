// Package netns runs a function on an OS thread switched into a network
// namespace: sockets it opens and processes it starts belong to that
// namespace. It is the one place felix, node and the lab enter a
// namespace.
package netns

import (
	"fmt"
	"path/filepath"
	"runtime"

	vnetns "github.com/vishvananda/netns"
)

// Dir is where `ip netns` keeps its named namespaces.
const Dir = "/run/netns"

// Path is the file of the namespace `ip netns` names name.
func Path(name string) string { return filepath.Join(Dir, name) }

// Do opens the namespace at path (for example Path("node-a")) and runs fn
// in it, as DoIn.
func Do(path string, fn func() error) error {
	h, err := vnetns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	defer h.Close()
	return DoIn(h, path, fn)
}

// DoIn runs fn on a locked OS thread switched into the namespace target
// (name says which, for errors) and returns fn's error. The thread is
// switched back before it is unlocked. When switching back fails the
// thread stays locked, so the runtime ends it with its goroutine instead
// of reusing a thread in the wrong namespace, and the error says so.
func DoIn(target vnetns.NsHandle, name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("reading the current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := vnetns.Set(target); err != nil {
			// setns failed: the thread is still where it was.
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := vnetns.Set(orig); err != nil {
			errc <- fmt.Errorf("leaving network namespace %s: %w (after: %v)", name, err, ferr)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
