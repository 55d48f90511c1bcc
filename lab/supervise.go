package lab

import (
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"
)

// SuperviseEnv, set to "1" in its environment, turns the lab binary (or a
// test binary that calls MaybeSupervise first) into a supervisor of the
// command in its arguments: it restarts the command whenever it exits on
// its own, as kubelet restarts a DaemonSet's pod, and stops it on SIGTERM.
const SuperviseEnv = "PALISADE_LAB_SUPERVISE"

// restartDelay is how long the supervisor waits before a restart.
const restartDelay = 500 * time.Millisecond

// MaybeSupervise runs the supervisor (or a pod's server, see ServeEnv)
// and exits when this process was started as one; otherwise it returns
// at once. Call it first in main (and
// in TestMain of tests that start labs).
func MaybeSupervise() {
	maybeServe()
	if os.Getenv(SuperviseEnv) != "1" {
		return
	}
	os.Exit(supervise(os.Args[1:]))
}

// supervise runs argv until SIGTERM or SIGINT, restarting it when it
// exits. The child gets SIGTERM if the supervisor dies.
func supervise(argv []string) int {
	if len(argv) == 0 {
		log.Error("supervisor: no command")
		return 2
	}
	// Pdeathsig follows the thread that started the child.
	runtime.LockOSThread()
	log.SetFormatter(&log.TextFormatter{FullTimestamp: true})
	logger := log.WithField("command", argv[0])
	env := os.Environ()
	for i, e := range env {
		if e == SuperviseEnv+"=1" {
			env = append(env[:i:i], env[i+1:]...)
			break
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	for restarts := 0; ; restarts++ {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		if err := cmd.Start(); err != nil {
			logger.WithError(err).Error("supervisor: cannot start")
			return 1
		}
		logger.WithFields(log.Fields{"pid": cmd.Process.Pid, "restarts": restarts}).Info("supervisor: started")
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			logger.WithField("signal", sig).Info("supervisor: stopped")
			return 0
		case err := <-done:
			logger.WithError(err).Warn("supervisor: exited on its own; restarting")
		}
		select {
		case <-sigs:
			return 0
		case <-time.After(restartDelay):
		}
	}
}
