package main

import "sync"

// together runs steps that do not depend on each other at once, waits
// for all of them, and returns the first error in the order they were
// given (each step's error names what failed).
func together(steps ...func() error) error {
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, step := range steps[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = step()
		}()
	}
	errs[0] = steps[0]()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
