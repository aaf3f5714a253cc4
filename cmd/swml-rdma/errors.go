package main

import (
	"errors"
	"fmt"
	"strings"
)

// joinDistinct joins the workers' errors (index = rank) for one message:
// an error every failing worker shares (a configuration error, the same
// abort) is printed once, naming who failed; different errors are listed
// per rank. nil if none failed.
func joinDistinct(errs []error) error {
	var first error
	var ranks []string
	same := true
	for r, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		} else if err.Error() != first.Error() {
			same = false
		}
		ranks = append(ranks, fmt.Sprint(r))
	}
	switch {
	case first == nil:
		return nil
	case len(ranks) == 1:
		return fmt.Errorf("worker %s: %w", ranks[0], first)
	case same && len(ranks) == len(errs):
		return fmt.Errorf("every worker: %w", first)
	case same:
		return fmt.Errorf("workers %s: %w", strings.Join(ranks, ", "), first)
	}
	var each []error
	for r, err := range errs {
		if err != nil {
			each = append(each, fmt.Errorf("worker %d: %w", r, err))
		}
	}
	return errors.Join(each...)
}
