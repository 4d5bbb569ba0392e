package task

import (
	"errors"
	"fmt"
	"time"
)

// Error sentinels. Backends and services wrap them with a message for people; the HTTP layer
// maps each to one status code. Test with errors.Is.
var (
	ErrNotFound   = errors.New("not found")
	ErrExists     = errors.New("already exists") // create of an id that is taken
	ErrConflict   = errors.New("conflict")       // the task changed, or the transition is not allowed from its status
	ErrStaleLease = errors.New("stale lease")    // a heartbeat or result carries a token that no longer owns the task
	ErrInvalid    = errors.New("invalid")        // bad input
	ErrTooLarge   = errors.New("too large")      // payload or result over the limit
	ErrNotDue     = errors.New("not due")        // the consumer saw a stale due-index entry
	ErrThrottled  = errors.New("throttled, retry later")
	// ErrPrecondition: a conditional change names a revision that is no longer the stored one;
	// nothing was written.
	ErrPrecondition = errors.New("precondition failed")
	// ErrCancelled answers a heartbeat of a task whose cancel was accepted while it ran: the
	// executor stops its handler and reports the outcome cancelled (see CancelRunning).
	ErrCancelled = errors.New("cancelled")
	// ErrStorageFull: the store has no room left, such as SQLite on a full disk. Nothing was
	// written; the call may be retried once there is room.
	ErrStorageFull = errors.New("storage full")
	// ErrUnavailable: the store did not answer, or failed in a way that says nothing of the call
	// (the network, the service's own fault), after its bounded retries. A write may or may not
	// have been made; every write of the API is safe to send again (a schedule by its id).
	ErrUnavailable = errors.New("store unavailable")
	// ErrBuried: a create whose message was sent first (Task.Nonce) came after a claim of that
	// message found no task and dropped it (Store.Bury). Nothing was written; the task needs a
	// create without a nonce, with its trigger (the schedule path writes it new, for the
	// consumer).
	ErrBuried = errors.New("its message was dropped before the task was written")
)

type codedError struct {
	kind error
	msg  string
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.kind }

// Errorf returns an error that reads as the formatted message and matches kind with errors.Is.
// The message is meant for the caller, so it must not carry internals.
func Errorf(kind error, format string, args ...any) error {
	return &codedError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Early is the ErrNotDue of a claim that came before its task may be claimed, when that time is
// known: before its NotBefore, or, for the queue message that times a running task's lease,
// before the lease ends. The claim's worker hides its message until then (DueAt) rather than
// retrying it sooner, to be refused again.
type Early struct {
	Until time.Time
	Msg   string
}

func (e *Early) Error() string { return e.Msg }

// Unwrap makes an Early match ErrNotDue.
func (e *Early) Unwrap() error { return ErrNotDue }

// notDueUntil is the Early of a task whose claim is refused until until.
func notDueUntil(until time.Time, format string, args ...any) error {
	return &Early{Until: until, Msg: fmt.Sprintf(format, args...)}
}

// DueAt returns when a claim refused with err may be tried again, if err is an Early that says.
func DueAt(err error) (time.Time, bool) {
	var e *Early
	if errors.As(err, &e) && !e.Until.IsZero() {
		return e.Until, true
	}
	return time.Time{}, false
}
