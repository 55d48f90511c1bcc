package lab

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// RestartAgent stops calico-node on a node with sig (the supervisor, like
// kubelet, starts it again) and waits until a new agent runs and every BGP
// session of the lab is Established again. It returns how long that took
// from the signal.
func (l *Lab) RestartAgent(ctx context.Context, node string, sig syscall.Signal, timeout time.Duration) (time.Duration, error) {
	old, err := l.AgentPID(node)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	if err := syscall.Kill(old, sig); err != nil {
		return 0, fmt.Errorf("signalling calico-node on %s (pid %d): %w", node, old, err)
	}
	if err := l.waitAgent(ctx, node, old, timeout); err != nil {
		return time.Since(began), err
	}
	if _, err := l.WaitSessions(ctx, timeout-time.Since(began)); err != nil {
		return time.Since(began), fmt.Errorf("after %s of calico-node on %s: %w", sig, node, err)
	}
	return time.Since(began), nil
}

// waitAgent waits until a calico-node other than pid old runs on node.
func (l *Lab) waitAgent(ctx context.Context, node string, old int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if pid, err := l.AgentPID(node); err == nil && pid != old {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("calico-node on %s was not restarted within %s", node, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
