// Package undo records the steps of a CNI ADD as they succeed, so that a
// failure later in the flow can take them back in reverse order.
package undo

import (
	log "github.com/sirupsen/logrus"
)

// Stack holds undo actions; the zero value is ready to use.
type Stack struct {
	steps []step
}

type step struct {
	what string
	fn   func() error
}

// Push records how to take back the step just done.
func (s *Stack) Push(what string, fn func() error) {
	s.steps = append(s.steps, step{what, fn})
}

// Run takes every recorded step back, newest first, logging (not stopping
// at) failures, and reports how many failed.
func (s *Stack) Run(logger log.FieldLogger) (failed int) {
	for i := len(s.steps) - 1; i >= 0; i-- {
		st := s.steps[i]
		if err := st.fn(); err != nil {
			failed++
			logger.WithError(err).WithField("step", st.what).Error("Rollback step failed; state may be left behind")
			continue
		}
		logger.WithField("step", st.what).Info("Rolled back")
	}
	s.steps = nil
	return failed
}
