package task

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Failed are the statuses a redrive takes a task from: it ran and failed for good, fatally or
// with its attempts (or its deadline) used up.
var Failed = []Status{StatusFatalFailure, StatusDead}

// RedriveOptions change a task as it is redriven. Zero fields keep the task's own.
type RedriveOptions struct {
	// MaxAttempts is the new life's attempt budget; zero keeps the task's max_attempts.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Payload replaces the task's payload; nil keeps it.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Priority moves the task to another of its lambda's priorities; empty keeps it.
	Priority string `json:"priority,omitempty"`
}

// Check validates o for a task of lambda l: the priority is one of l's, max_attempts within
// 1..MaxAttemptsLimit, the payload one JSON value within c.PayloadLimit.
func (o RedriveOptions) Check(l Lambda, c Config) error {
	if o.Priority != "" && !l.HasPriority(o.Priority) {
		return Errorf(ErrInvalid, "priority %q is not one of lambda %s's priorities %v", Echo(o.Priority), l.Name, l.Priorities)
	}
	if o.MaxAttempts < 0 || o.MaxAttempts > MaxAttemptsLimit {
		return Errorf(ErrInvalid, "max_attempts must be in 1..%d, got %d", MaxAttemptsLimit, o.MaxAttempts)
	}
	if o.Payload == nil {
		return nil
	}
	if len(o.Payload) > c.PayloadLimit {
		return Errorf(ErrTooLarge, "payload is %d bytes; the limit is %d", len(o.Payload), c.PayloadLimit)
	}
	return CheckJSON("payload", o.Payload)
}

// Redrive gives a task that failed for good (Failed) a second life: it is new and due now, with
// a fresh attempt budget (attempts back to zero, max_attempts the task's own or o's), and o's
// payload or priority if given. Its error stays until the new life overwrites it, as between
// retries: it tells why the last life ended until the task succeeds (which clears it) or fails
// again (which replaces it). Its result, if any, is cleared.
//
// It refuses (ErrConflict):
//   - a task other tasks wait for (Downstream): they learnt, or are about to learn, that it
//     failed, and ended with it (upstream_failed) or ran with its failure (all_done). A second
//     life would not reach them; schedule the flow again under new ids instead.
//   - a task past its deadline: it would be dead again before it could run.
//
// A store writes the result with Store.Redrive, which writes the payload too and keeps it (and
// the upstream list) for as long as the task lives again.
func Redrive(t Task, o RedriveOptions, now time.Time, c Config) (Task, error) {
	if err := notFrom(t, "redrive", Failed...); err != nil {
		return t, err
	}
	if t.Downstream {
		return t, Errorf(ErrConflict, "task %s has downstreams, which were told it ended %s; redrive does not run them again: schedule the flow again under new ids", t.ID, t.Status)
	}
	if t.pastDeadline(now) {
		return t, Errorf(ErrConflict, "task %s is past its deadline (%s); it would be dead again before it ran", t.ID, t.Deadline.Format(time.RFC3339))
	}
	if o.Payload != nil && len(o.Payload) > c.PayloadLimit {
		return t, Errorf(ErrTooLarge, "payload is %d bytes; the limit is %d", len(o.Payload), c.PayloadLimit)
	}
	t = t.next(StatusNew, now, at(now))
	t.Attempts, t.Snoozes, t.Result, t.NotifyCursor = 0, 0, nil, ""
	if o.MaxAttempts > 0 {
		t.MaxAttempts = o.MaxAttempts
	}
	if o.Payload != nil {
		t.Payload = slices.Clone(o.Payload)
	}
	if o.Priority != "" {
		t.Priority = o.Priority
	}
	return t, nil
}

// MaxRedriveLimit is the largest page of a redrive by filter: each task of the page is read and
// written, and the request must end well within the API's 29 s.
const MaxRedriveLimit = 100

// RedriveSkip says why a redrive by filter left a task as it was.
type RedriveSkip struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// RedriveResult is what one request of a redrive by filter did: it lists one page of the failed
// tasks (see ListParams) and redrives those it can. Next is the page's cursor: empty once every
// matching task has been looked at.
type RedriveResult struct {
	Redriven int           `json:"redriven"`
	Skipped  int           `json:"skipped"`
	Skips    []RedriveSkip `json:"skips,omitempty"`
	Next     string        `json:"next,omitempty"`
}

func (r RedriveResult) String() string {
	return fmt.Sprintf("redriven %d, skipped %d", r.Redriven, r.Skipped)
}
