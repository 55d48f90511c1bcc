package nsexec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
)

// A warm process is a command started ahead of time and left waiting on
// its standard input. Starting a process costs milliseconds here (exec,
// dynamic linking, library start-up: 6–8 ms for iptables-nft-restore on a
// small VM), which is most of a small ruleset update; a warm process pays
// that before the update is known, so the update waits only for the work
// itself.
//
// Only commands that do nothing before reading their input may be kept
// warm: iptables-nft-restore reads the kernel's tables when it commits,
// not when it starts. iptables-legacy-restore must not be: it may take the
// xtables lock at start-up and would hold it while idle.
type warmProc struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr bytes.Buffer
	done           chan struct{}
	err            error
}

// warmPool holds at most one warm process per command line, the primer
// of each command line (see Prime), and the command lines run warm so far
// (started again by WarmUp).
type warmPool struct {
	mu       sync.Mutex
	procs    map[string]*warmProc
	primers  map[string]string
	wanted   map[string][]string // key → name and args
	starting map[string]bool
	closed   bool
}

// Prime sets input that every warm process of a command line is given as
// soon as it starts, before it waits for its real input: work that must
// leave no trace, done early so the real input finds the process further
// along. iptables-nft-restore, for one, loads a match extension the first
// time it parses a rule using it; a primer that adds and removes a rule
// with the usual matches in a transaction of its own loads them ahead.
// A warm process whose primer failed is not used.
func (r *Runner) Prime(primer string, name string, args ...string) {
	r.warm.mu.Lock()
	defer r.warm.mu.Unlock()
	if r.warm.primers == nil {
		r.warm.primers = map[string]string{}
	}
	r.warm.primers[warmKey(name, args)] = primer
}

func (r *Runner) primer(key string) string {
	r.warm.mu.Lock()
	defer r.warm.mu.Unlock()
	return r.warm.primers[key]
}

func warmKey(name string, args []string) string {
	return name + "\x00" + strings.Join(args, "\x00")
}

// startWarm starts the command in the runner's namespace, gives it
// primer, and leaves it waiting for input.
func (r *Runner) startWarm(name string, args []string, primer string) (*warmProc, error) {
	p := &warmProc{done: make(chan struct{})}
	err := r.Do(func() error {
		p.cmd = exec.Command(name, args...)
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		var err error
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			return err
		}
		return p.cmd.Start()
	})
	if err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if primer != "" {
		if _, err := io.WriteString(p.stdin, primer); err != nil {
			p.kill()
			return nil, err
		}
	}
	return p, nil
}

// take returns the warm process of a command line, or nil.
func (r *Runner) take(key string) *warmProc {
	r.warm.mu.Lock()
	defer r.warm.mu.Unlock()
	p := r.warm.procs[key]
	delete(r.warm.procs, key)
	if p != nil {
		select {
		case <-p.done: // died while idle (killed by someone): not usable.
			return nil
		default:
		}
	}
	return p
}

// refill starts the next warm process of a command line in the
// background.
func (r *Runner) refill(key, name string, args []string) {
	r.warm.mu.Lock()
	if r.warm.starting == nil {
		r.warm.starting = map[string]bool{}
	}
	if r.warm.starting[key] || r.warm.closed {
		r.warm.mu.Unlock()
		return
	}
	r.warm.starting[key] = true
	r.warm.mu.Unlock()
	go func() {
		p, err := r.startWarm(name, args, r.primer(key))
		r.warm.mu.Lock()
		defer r.warm.mu.Unlock()
		delete(r.warm.starting, key)
		if err != nil {
			return // the next RunWarm starts one itself.
		}
		if r.warm.closed || r.warm.procs[key] != nil {
			p.kill()
			return
		}
		if r.warm.procs == nil {
			r.warm.procs = map[string]*warmProc{}
		}
		r.warm.procs[key] = p
	}()
}

func (p *warmProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.stdin.Close()
	<-p.done
}

// RunWarm is Run for a command that can be kept warm (see warmProc): it
// hands stdin to a process started earlier when there is one; WarmUp
// starts the next one. When a warm
// process fails, the input is run once more in a process started now,
// without primer: a failed primer must not fail the real input (the
// commands kept warm apply their input atomically or not at all, so a
// second try is safe).
func (r *Runner) RunWarm(ctx context.Context, stdin string, name string, args ...string) ([]byte, error) {
	key := warmKey(name, args)
	p := r.take(key)
	r.want(key, name, args)
	if p != nil {
		out, err := p.finish(ctx, stdin, name, args)
		if err == nil || ctx.Err() != nil {
			return out, err
		}
	}
	p, err := r.startWarm(name, args, "")
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return p.finish(ctx, stdin, name, args)
}

// finish gives a started process its input and waits for it.
func (p *warmProc) finish(ctx context.Context, stdin string, name string, args []string) ([]byte, error) {
	_, werr := io.WriteString(p.stdin, stdin)
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
		return nil, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), ctx.Err())
	}
	err := p.err
	if err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return p.stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(p.stderr.String()))
	}
	return p.stdout.Bytes(), nil
}

func (r *Runner) want(key, name string, args []string) {
	r.warm.mu.Lock()
	defer r.warm.mu.Unlock()
	if r.warm.wanted == nil {
		r.warm.wanted = map[string][]string{}
	}
	r.warm.wanted[key] = append([]string{name}, args...)
}

// WarmUp starts, in the background, a warm process for every command line
// run through RunWarm whose warm process was used. Call it when a batch of
// work is done: a process starting (and its primer committing) beside the
// work would slow it down, and a primer committed in the middle of an
// iptables-nft-restore makes it read the tables again.
func (r *Runner) WarmUp() {
	r.warm.mu.Lock()
	var missing []string
	for key := range r.warm.wanted {
		if r.warm.procs[key] == nil {
			missing = append(missing, key)
		}
	}
	r.warm.mu.Unlock()
	for _, key := range missing {
		r.warm.mu.Lock()
		cmd := r.warm.wanted[key]
		r.warm.mu.Unlock()
		r.refill(key, cmd[0], cmd[1:])
	}
}

// closeWarm kills the idle warm processes.
func (r *Runner) closeWarm() {
	r.warm.mu.Lock()
	procs := r.warm.procs
	r.warm.procs, r.warm.closed = nil, true
	r.warm.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
}
