package nsexec

// HasWarm reports whether a warm process of the command line is ready to
// be taken (for tests: a process seen in /proc may not be registered yet).
func (r *Runner) HasWarm(name string, args ...string) bool {
	r.warm.mu.Lock()
	defer r.warm.mu.Unlock()
	return r.warm.procs[warmKey(name, args)] != nil
}
