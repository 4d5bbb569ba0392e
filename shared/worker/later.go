package worker

import (
	"errors"
	"fmt"
	"time"
)

// Later is the error by which a handler asks for its task to run again after Delay: returned by
// Snooze and RetryAfter, and read back with errors.As. A fatal error wins over it: RetryAfter of
// an error wrapping ErrFatal ends the task as fatal_failure.
type Later struct {
	// Delay is how long after this run ends the task runs again: from 0 to task.MaxDelay (a
	// delay outside them makes the run a retriable failure that says so).
	Delay time.Duration
	// Counted says the run counts as an attempt (RetryAfter), as a retriable failure does; a
	// snooze does not count (Snooze).
	Counted bool
	// Err is RetryAfter's error, which the task keeps; nil for a snooze.
	Err error
}

// Snooze asks for the task to run again after d, with no attempt counted (as River's JobSnooze):
// return it as the handler's error. The task waits as new, and its next run gets the same
// Attempt. Its deadline still holds: a snooze past it ends the task dead. A task snoozed more than
// task.MaxSnoozes times has each further snooze counted as an attempt, so it cannot wait forever.
//
//	if !ready { return nil, worker.Snooze(time.Minute) }
func Snooze(d time.Duration) error { return &Later{Delay: d} }

// RetryAfter is a retriable failure, err, whose next attempt runs after d instead of the lambda's
// backoff (as asynq's RetryDelayFunc): the attempt counts, and a task whose attempts or deadline
// are used up is dead. err may be nil.
//
//	if resp.StatusCode == 429 { return nil, worker.RetryAfter(retryAfter(resp), errRateLimited) }
func RetryAfter(d time.Duration, err error) error { return &Later{Delay: d, Counted: true, Err: err} }

// Error is RetryAfter's error's text, or says what was asked for.
func (e *Later) Error() string {
	switch {
	case !e.Counted:
		return fmt.Sprintf("snoozed for %s", e.Delay)
	case e.Err == nil:
		return fmt.Sprintf("retry after %s", e.Delay)
	}
	return e.Err.Error()
}

// Unwrap returns RetryAfter's error.
func (e *Later) Unwrap() error { return e.Err }

// LaterOf returns the Later that err asks for, if it asks for one and is not fatal.
func LaterOf(err error) (*Later, bool) {
	var l *Later
	if !errors.As(err, &l) || !Retriable(err) {
		return nil, false
	}
	return l, true
}
