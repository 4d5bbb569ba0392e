package task

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The transitions. Each is a pure function: it takes the task as read, checks that the move is
// allowed from its status, and returns the task as it must be written, with Version bumped and
// the next trigger set. A store writes the result only if the stored Version is still t.Version.

func (t Task) next(s Status, now time.Time, trigger *time.Time) Task {
	if s.Terminal() && t.Downstream {
		trigger = at(now) // the consumer tells the downstreams (see flow.go)
	}
	if s != StatusEnqueued || t.Status != StatusEnqueued {
		t.NotBefore = nil // it holds while the task stays enqueued: a resend keeps it
		t.RateSlot = nil  // so does a booking
	}
	t.From, t.Status, t.UpdatedAt, t.NextTriggerAt = t.Status, s, now, trigger
	t.Version++
	t.Ended = nil
	t.Nonce = "" // a create's only: a transition's write has its trigger in the due index
	t.Parked = false
	if s != StatusClaimed && s != StatusProcessing {
		t.Lease = ""
		t.CancelRequested = false
	}
	return t
}

func notFrom(t Task, verb string, allowed ...Status) error {
	if slices.Contains(allowed, t.Status) {
		return nil
	}
	return Errorf(ErrConflict, "task %s is %s; cannot %s it", t.ID, t.Status, verb)
}

func (t Task) due(now time.Time) bool { return t.NextTriggerAt != nil && !t.NextTriggerAt.After(now) }

func (t Task) pastDeadline(now time.Time) bool { return t.Deadline != nil && now.After(*t.Deadline) }

// Unblock moves a pending task to new once its upstream tasks are done.
func Unblock(t Task, now time.Time) (Task, error) {
	if err := notFrom(t, "unblock", StatusPending); err != nil {
		return t, err
	}
	return t.next(StatusNew, now, at(maxTime(t.RunAt, now))), nil
}

// Enqueue moves a due task into its queue: from new or retriable_failure once due, or again from
// enqueued when its message was never claimed. A task past its deadline goes to dead instead;
// the caller sends a queue message only if the result is enqueued.
//
// A task enqueued again waits twice as long as it last did (at least the enqueue timeout, at
// most MaxEnqueueWait) before it is enqueued once more. A message that goes unclaimed for an
// enqueue timeout most likely still waits in a queue that does not drain, rather than being lost:
// a queue keeps a message until a claim settles it. So a task that waits W in its queue costs
// about 1 + log2(W / EnqueueTimeout) messages, not one per timeout (docs/guarantees.md).
func Enqueue(t Task, now time.Time, c Config) (Task, error) {
	if err := notFrom(t, "enqueue", StatusNew, StatusRetriableFailure, StatusEnqueued); err != nil {
		return t, err
	}
	if !t.due(now) {
		return t, Errorf(ErrNotDue, "task %s is not due until %s", t.ID, t.NextTriggerAt)
	}
	if t.pastDeadline(now) {
		t.Error = "deadline passed before the task could run"
		return t.next(StatusDead, now, nil), nil
	}
	wait := c.EnqueueTimeout
	if t.Status == StatusEnqueued {
		last := min(max(t.NextTriggerAt.Sub(t.UpdatedAt), 0), MaxEnqueueWait)
		wait = max(wait, min(2*last, MaxEnqueueWait))
	}
	return t.next(StatusEnqueued, now, at(now.Add(wait))), nil
}

// MaxSendAhead is how long before its run time a task's message may be sent: SQS holds a message
// back (DelaySeconds) at most 15 minutes. A task due within it skips the consumer's sweep.
const MaxSendAhead = 15 * time.Minute

// EnqueueAhead moves a new task (or one failed retriably, waiting for its retry) into its queue
// before it is due, and returns the message to send for it: the schedule path does so for a task
// that runs within MaxSendAhead, so it needs no sweep. The message is delayed to its run time and
// carries it: a queue that counts delays in whole seconds (SQS) rounds it down, and the executor
// waits out the rest (under a second) before it claims. It fails with ErrNotDue for a
// task due later, or one that its deadline would end first. The resend trigger counts the
// enqueue timeout from the run time, when the message can first be claimed.
func EnqueueAhead(t Task, now time.Time, c Config) (Task, Message, error) {
	if err := notFrom(t, "enqueue", StatusNew, StatusRetriableFailure); err != nil {
		return t, Message{}, err
	}
	if t.Parked {
		return t, Message{}, Errorf(ErrConflict, "task %s is held by a gate", t.ID)
	}
	runAt := now
	if t.NextTriggerAt != nil {
		runAt = maxTime(*t.NextTriggerAt, now)
	}
	if runAt.Sub(now) > MaxSendAhead {
		return t, Message{}, Errorf(ErrNotDue, "task %s is due at %s, more than %s ahead", t.ID, runAt, MaxSendAhead)
	}
	if t.pastDeadline(runAt) {
		return t, Message{}, Errorf(ErrNotDue, "task %s would be past its deadline when due", t.ID)
	}
	from, ended := t.From, t.Ended
	next := t.next(StatusEnqueued, now, at(runAt.Add(c.EnqueueTimeout)))
	if from != "" {
		next.From = from // in the write of the transition before it (a retry): what happened is that
		next.Ended = ended
	}
	if runAt.After(now) {
		next.NotBefore = &runAt
	}
	return next, next.MessageAt(now), nil
}

// MaxRetryAhead is the longest backoff of a retry that RetryAhead sends ahead: a retry sent ahead
// is enqueued, and so counts toward its lambda's cap (Lambda.MaxEnqueued), for its whole backoff.
// A longer one waits in the store, as retriable_failure, for the consumer.
const MaxRetryAhead = time.Minute

// RetryAhead moves t, just failed retriably (retriable_failure, as Fail or Timeout left it, in
// the same write), into its queue for its retry when that is due within MaxRetryAhead, and
// returns the message to send once written. It fails with ErrNotDue for a later retry, and
// ErrConflict for a task that is not waiting for a retry.
func RetryAhead(t Task, now time.Time, c Config) (Task, Message, error) {
	if err := notFrom(t, "send ahead", StatusRetriableFailure); err != nil {
		return t, Message{}, err
	}
	if t.NextTriggerAt != nil && t.NextTriggerAt.Sub(now) > MaxRetryAhead {
		return t, Message{}, Errorf(ErrNotDue, "task %s retries at %s, more than %s ahead", t.ID, t.NextTriggerAt, MaxRetryAhead)
	}
	return EnqueueAhead(t, now, c)
}

// ClaimEarly is how much before its NotBefore a claim still takes a task: the clock skew between
// the worker that waited for the run time and the status controller that checks it.
const ClaimEarly = time.Second

// Refused reports whether err says that a write did not happen (a refused transition, a missing
// or taken task, bad input, a start held by a limit), as opposed to one whose outcome is unknown
// (a timeout, a throttle, a store fault): after those, the write may have landed.
func Refused(err error) bool {
	for _, k := range []error{ErrConflict, ErrNotDue, ErrStaleLease, ErrInvalid, ErrNotFound, ErrExists, ErrTooLarge, ErrCancelled, ErrBuried, ErrHeld} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// Hold hands back an enqueued task whose claim found its gate closed (paused or dropping): it
// becomes new and due at once (at its run time, if the message came before it: NotBefore), so
// the consumer's sweep applies the gate to it, parking or dropping it (or, for a paused lambda,
// leaving it where it is), as it does for any due task.
func Hold(t Task, now time.Time) (Task, error) {
	if err := notFrom(t, "hold", StatusEnqueued); err != nil {
		return t, err
	}
	due := now
	if t.NotBefore != nil && t.NotBefore.After(now) {
		due = *t.NotBefore // a message that came early keeps the task's run time
	}
	return t.next(StatusNew, now, at(due)), nil
}

// MaxEnqueueWait caps the wait of a task enqueued again and again (see Enqueue). A message lost
// after its first resend (moved to a dead-letter queue after failed claims) is sent again within
// this; it is well below the retention of a queue (sqsqueue.QueueRetention, 14 days).
const MaxEnqueueWait = 24 * time.Hour

// Unsent makes an enqueued task whose message could not be sent due again after a poll interval,
// so that the consumer's next pass sends it, rather than the enqueue timeout.
func Unsent(t Task, now time.Time, c Config) (Task, error) {
	if err := notFrom(t, "resend", StatusEnqueued); err != nil {
		return t, err
	}
	return t.next(StatusEnqueued, now, at(now.Add(c.PollInterval))), nil
}

// Claim gives an enqueued task to one worker, with a fresh lease, and starts it: the task is
// processing at once, due a heartbeat timeout from now, as after a heartbeat. It counts an
// attempt. (Claims once moved to claimed, and a first heartbeat to processing: a write more per
// task. Tasks written so are still read, and run or time out like processing ones.)
func Claim(t Task, lease string, now time.Time, c Config) (Task, error) {
	if err := notFrom(t, "claim", StatusEnqueued); err != nil {
		return t, err
	}
	if t.NotBefore != nil && now.Before(t.NotBefore.Add(-ClaimEarly)) {
		// A message that came early: a resend or a duplicate of a task sent ahead. Its own
		// message, delayed to NotBefore, is still to come.
		return t, notDueUntil(*t.NotBefore, "task %s is not due until %s", t.ID, t.NotBefore)
	}
	t = t.next(StatusProcessing, now, at(now.Add(c.HeartbeatTimeout)))
	t.Lease = lease
	t.Attempts++
	// A task claimed before AttemptSeq existed counts from its attempts.
	t.AttemptSeq = max(t.AttemptSeq+1, t.Attempts)
	t.StartedAt, t.EndedAt, t.Worker, t.LogLocation = at(now), nil, "", nil
	return t, nil // timed by the store, unless its caller names a message (TimedBy)
}

// LeaseOnQueue reports whether t runs under a lease its queue message times (Message): a store
// whose due index costs writes gives it no entry there.
func (t Task) LeaseOnQueue() bool {
	return slices.Contains(Running, t.Status) && t.Message != "" && t.MessageFor == t.Lease
}

// TimedBy makes the message of id, which its claim's worker keeps hidden until the run's end is
// written, the timer of t's lease, just claimed. A message that timed an earlier claim of the
// task (a copy its event source mapping delivered twice, or one received after it was handed
// back) times none: its first holder may delete it, so the store times this lease.
func (t Task) TimedBy(id string) Task {
	if id != "" && id != t.Message {
		t.Message, t.MessageFor = id, t.Lease
	}
	return t
}

// Rearm gives a running task whose lease a queue message timed (Task.Message) back to the store's
// timer: the message went to a dead-letter queue, so no redelivery will time the lease out. The
// task keeps its lease and lease end; a store with a due index gives it its entry there again.
func Rearm(t Task, now time.Time) (Task, error) {
	if err := notFrom(t, "rearm", StatusClaimed, StatusProcessing); err != nil {
		return t, err
	}
	if !t.LeaseOnQueue() {
		return t, Errorf(ErrConflict, "task %s has its lease timed by the store already", t.ID)
	}
	t = t.next(t.Status, now, t.NextTriggerAt)
	t.MessageFor = "" // the id stays: it timed this claim
	return t, nil
}

func checkLease(t Task, lease, verb string) error {
	if (t.Status != StatusClaimed && t.Status != StatusProcessing) || t.Lease != lease {
		return Errorf(ErrStaleLease, "cannot %s task %s: the lease is no longer held (task is %s)", verb, t.ID, t.Status)
	}
	return nil
}

// Heartbeat records that the lease holder is still running the task, renewing its lease (it
// also starts a task left claimed by an older version). A task whose cancel was accepted
// (CancelRequested) fails with ErrCancelled, and its lease is not renewed: the holder must stop
// its handler and report it (CancelRunning) before the lease it has runs out.
func Heartbeat(t Task, lease string, now time.Time, c Config) (Task, error) {
	if err := checkLease(t, lease, "heartbeat"); err != nil {
		return t, err
	}
	if t.CancelRequested {
		return t, Errorf(ErrCancelled, "task %s was cancelled while running; stop its handler and report the outcome cancelled", t.ID)
	}
	return t.next(StatusProcessing, now, at(now.Add(c.HeartbeatTimeout))), nil
}

// Succeed ends the task with its handler's result. A result over the payload limit, or one that
// CheckJSON refuses, ends the task as a fatal failure that says why: a retry would end the same.
// A task whose cancel was accepted before (CancelRequested) ends cancelled instead, and the result
// is not kept: see CancelRunning.
func Succeed(t Task, lease string, result json.RawMessage, now time.Time, c Config) (Task, error) {
	if err := checkLease(t, lease, "complete"); err != nil {
		return t, err
	}
	if t.CancelRequested {
		return t.endCancelled(now, "cancelled while running; the run's success came after the cancel and was discarded"), nil
	}
	if len(result) > c.PayloadLimit {
		return fail(t, fmt.Sprintf("result is %d bytes; the limit is %d", len(result), c.PayloadLimit), OutcomeFatal, now, c, 0), nil
	}
	if len(result) > 0 {
		if err := CheckJSON("result", result); err != nil {
			return fail(t, err.Error(), OutcomeFatal, now, c, 0), nil
		}
	}
	t = t.next(StatusSuccess, now, nil)
	t.Result, t.Error = result, ""
	return t.endAttempt(OutcomeSuccess, now), nil
}

// Fail records a failed run. A fatal failure ends the task. A retriable one schedules another
// attempt after a backoff, unless attempts or the deadline are used up: then the task is dead.
// jitter is a random number in [0,1). The task keeps msg cut to MaxErrorBytes. A task whose
// cancel was accepted before (CancelRequested) ends cancelled instead: see CancelRunning.
func Fail(t Task, lease, msg string, retriable bool, now time.Time, c Config, jitter float64) (Task, error) {
	if err := checkLease(t, lease, "fail"); err != nil {
		return t, err
	}
	if t.CancelRequested {
		return t.endCancelled(now, TruncateError("cancelled while running; the run then failed: "+msg)), nil
	}
	o := OutcomeFatal
	if retriable {
		o = OutcomeRetriable
	}
	return fail(t, msg, o, now, c, jitter), nil
}

// fail ends the running attempt with outcome o, which retries it after its backoff (c's) unless
// it is OutcomeFatal.
func fail(t Task, msg string, o Outcome, now time.Time, c Config, jitter float64) Task {
	if o == OutcomeFatal {
		t.Error = TruncateError(msg)
		t.HandBacks = 0 // the attempt counted
		return t.next(StatusFatalFailure, now, nil).endAttempt(o, now)
	}
	return retry(t, msg, o, now, now.Add(c.retryDelay(t.Attempts, jitter)))
}

// retry ends the running attempt, which counted, with outcome o, and makes the task due again at
// retryAt; unless its attempts are used up, or its deadline comes before retryAt: then it is dead.
func retry(t Task, msg string, o Outcome, now, retryAt time.Time) Task {
	t.Error = TruncateError(msg)
	t.HandBacks = 0 // the attempt counted
	if t.Attempts >= t.MaxAttempts || t.pastDeadline(retryAt) {
		return t.next(StatusDead, now, nil).endAttempt(o, now)
	}
	return t.next(StatusRetriableFailure, now, at(retryAt)).endAttempt(o, now)
}

// CheckLater returns ErrInvalid unless delay is one a handler may ask to run again after
// (RetryAfter, Snooze): from zero up to MaxDelay, as far ahead as a task may be scheduled.
func CheckLater(delay time.Duration) error {
	if delay < 0 || delay > MaxDelay {
		return Errorf(ErrInvalid, "a delay to run again after must be within 0s..%s, got %s", MaxDelay, delay)
	}
	return nil
}

// RetryAfter records a run that failed retriably, as Fail does, and whose handler asked for the
// next attempt after delay instead of the backoff. The attempt counts: a task whose attempts are
// used up, or whose deadline comes before the delay is over, is dead. A task whose cancel was
// accepted before ends cancelled instead: see CancelRunning.
func RetryAfter(t Task, lease, msg string, delay time.Duration, now time.Time) (Task, error) {
	if err := checkLease(t, lease, "retry"); err != nil {
		return t, err
	}
	if err := CheckLater(delay); err != nil {
		return t, err
	}
	if t.CancelRequested {
		return t.endCancelled(now, TruncateError("cancelled while running; the run then failed: "+msg)), nil
	}
	return retry(t, msg, OutcomeRetriable, now, now.Add(delay)), nil
}

// MaxSnoozes is how many times a task may be snoozed (Snooze) in one life: each further snooze
// counts as an attempt, so a handler that snoozes forever ends its task dead once its attempts
// are used up, rather than keeping it waiting unnoticed. A redrive starts the count again.
const MaxSnoozes = 100

// Snooze records a run whose handler asked to run again after delay, with no attempt counted:
// the claim's attempt is given back, and the task is new, due at now + delay, with its lease
// released, as Release leaves it. The run is in the history all the same, as snoozed (its
// Number is the run's; the next run's Attempt is the same as this one's). Task.Snoozes counts the
// snoozes: past MaxSnoozes one counts as an attempt, as RetryAfter does. A task whose deadline
// comes before the delay is over is dead, as a retry's would be. A task whose cancel was accepted
// before ends cancelled instead: see CancelRunning.
func Snooze(t Task, lease string, delay time.Duration, now time.Time) (Task, error) {
	if err := checkLease(t, lease, "snooze"); err != nil {
		return t, err
	}
	if err := CheckLater(delay); err != nil {
		return t, err
	}
	if t.CancelRequested {
		return t.endCancelled(now, "cancelled while running; the run then asked to snooze"), nil
	}
	wake := now.Add(delay)
	if t.Snoozes >= MaxSnoozes {
		msg := fmt.Sprintf("snoozed for %s, after %d snoozes (task.MaxSnoozes): this one counts as an attempt", delay, t.Snoozes)
		return retry(t, msg, OutcomeRetriable, now, wake), nil
	}
	note := fmt.Sprintf("snoozed for %s by its handler", delay)
	t.HandBacks = 0 // it ran: no claim of it was handed back
	if t.pastDeadline(wake) {
		t.Error = TruncateError(fmt.Sprintf("%s, past its deadline %s", note, t.Deadline.Format(time.RFC3339)))
		return t.next(StatusDead, now, nil).endAttempt(OutcomeSnoozed, now), nil
	}
	t.Attempts--
	t.Snoozes++
	t = t.next(StatusNew, now, at(wake)).endAttempt(OutcomeSnoozed, now)
	t.Ended.Error = note // the task keeps the error of its last failure, if any
	return t, nil
}

// Timeout handles a claimed or processing task whose worker went silent past its trigger. It
// counts as a retriable failure of the attempt; the lease dies with it.
func Timeout(t Task, now time.Time, c Config, jitter float64) (Task, error) {
	if err := notFrom(t, "time out", StatusClaimed, StatusProcessing); err != nil {
		return t, err
	}
	if !t.due(now) {
		if t.NextTriggerAt == nil {
			return t, Errorf(ErrNotDue, "task %s has no timeout due", t.ID)
		}
		// Before its lease ends: the lease's end is when its worker is known to be lost.
		return t, notDueUntil(*t.NextTriggerAt, "task %s is not due until %s", t.ID, t.NextTriggerAt)
	}
	if t.CancelRequested {
		return t.endCancelled(now, "cancelled while running; its worker did not report within the heartbeat timeout"), nil
	}
	msg := "no heartbeat within the heartbeat timeout; the worker was lost"
	if t.Status == StatusClaimed {
		msg = "claimed but never started within the claim timeout; the worker was lost"
	}
	return fail(t, msg, OutcomeTimeout, now, c, jitter), nil
}

// Release hands a running task back untried, as when its executor shuts down: the attempt does
// not count, and the task is due again at once. A task whose cancel was accepted ends cancelled
// instead.
func Release(t Task, lease string, now time.Time) (Task, error) {
	if err := checkLease(t, lease, "release"); err != nil {
		return t, err
	}
	if t.CancelRequested {
		return t.endCancelled(now, "cancelled while running; its executor handed it back"), nil
	}
	t = t.next(StatusNew, now, at(now))
	t.Attempts--
	t.AttemptSeq-- // untried: the next claim takes its number
	return t, nil
}

// MaxHandBacks is how many claims of one attempt Unclaim hands back: a claim whose write lands
// but whose answer always comes too late would otherwise be handed back forever, and its task
// never reach dead.
const MaxHandBacks = 3

// Unclaim hands back, as Release does, a running task whose claim's answer never reached its
// worker, which runs nothing under it: the attempt does not count. Once MaxHandBacks claims of
// the attempt were handed back it fails with ErrConflict and changes nothing: the attempt then
// counts, at the task's heartbeat timeout. A task whose cancel was accepted ends cancelled, and
// that attempt does not count either: no handler ran, so its history has no attempt for it.
func Unclaim(t Task, lease string, now time.Time) (Task, error) {
	if err := checkLease(t, lease, "hand back"); err != nil {
		return t, err
	}
	if t.CancelRequested {
		t = t.next(StatusCancelled, now, nil)
		t.Error = "cancelled before it ran; its claim was handed back"
		t.Attempts--
		t.AttemptSeq--
		return t, nil
	}
	if t.HandBacks >= MaxHandBacks {
		return t, Errorf(ErrConflict, "task %s: %d claims of attempt %d were handed back already (MaxHandBacks); this one counts at its heartbeat timeout", t.ID, t.HandBacks, t.Attempts)
	}
	t, err := Release(t, lease, now)
	if err == nil {
		t.HandBacks++
	}
	return t, err
}

// Expire makes an in-flight task due now, as when the queue and executors that held it are
// known to be gone (a local restart). The consumer then handles it as timed out.
func Expire(t Task, now time.Time) (Task, error) {
	if err := notFrom(t, "expire", StatusEnqueued, StatusClaimed, StatusProcessing); err != nil {
		return t, err
	}
	t = t.next(t.Status, now, at(now))
	t.MessageFor = "" // due now in the store, whatever timed its lease
	return t, nil
}

// Cancel cancels a task. A waiting task ends cancelled at once. A running one (claimed or
// processing) is marked CancelRequested and stays running under its lease, with its trigger: see
// CancelRunning. A running task already marked fails with ErrConflict, as does an ended one.
func Cancel(t Task, now time.Time) (Task, error) {
	if slices.Contains(Running, t.Status) {
		if t.CancelRequested {
			return t, Errorf(ErrConflict, "task %s is running and its cancel was already requested", t.ID)
		}
		t = t.next(t.Status, now, t.NextTriggerAt)
		t.CancelRequested = true
		return t, nil
	}
	if err := notFrom(t, "cancel", Waiting...); err != nil {
		return t, err
	}
	return t.next(StatusCancelled, now, nil), nil
}

// CancelRunning ends a running task whose cancel was accepted, once its lease holder has stopped
// the handler: the executor reports it so (the outcome cancelled) after a heartbeat answered
// ErrCancelled.
//
// A cancel is accepted when Cancel's write of CancelRequested commits: every write of a task is
// conditional on its version, so the mark and a run's result are ordered. A result written first
// ends the task (success, a failure) and the cancel then fails with ErrConflict; a cancel written
// first makes every way out of the run end the task cancelled: this report, a result (Succeed and
// Fail discard it), a timeout (Timeout does not retry it), a release. So once a cancel is
// accepted no success is written, and a task never both succeeds and is cancelled.
func CancelRunning(t Task, lease string, now time.Time) (Task, error) {
	if err := checkLease(t, lease, "end as cancelled"); err != nil {
		return t, err
	}
	if !t.CancelRequested {
		return t, Errorf(ErrConflict, "task %s was not cancelled; report how its run ended", t.ID)
	}
	return t.endCancelled(now, "cancelled while running; the handler was stopped"), nil
}

// endCancelled ends a running task whose cancel was accepted, saying how.
func (t Task) endCancelled(now time.Time, why string) Task {
	t = t.next(StatusCancelled, now, nil)
	t.Error = why
	return t.endAttempt(OutcomeCancelled, now)
}

// Drop ends a waiting task because its gate is set to drop.
func Drop(t Task, now time.Time) (Task, error) {
	if err := notFrom(t, "drop", Waiting...); err != nil {
		return t, err
	}
	t = t.next(StatusDropped, now, nil)
	t.Error = "dropped by gate"
	return t, nil
}

// Park sets a due waiting task aside while a gate holds its collection. It keeps its status and
// its trigger, so Unpark puts it back where it was in its lane.
func Park(t Task, now time.Time) (Task, error) {
	if err := notFrom(t, "park", Waiting...); err != nil {
		return t, err
	}
	t = t.next(t.Status, now, t.NextTriggerAt)
	t.Parked = true
	return t, nil
}

// Unpark returns a parked task to its lane once its gate opens.
func Unpark(t Task, now time.Time) (Task, error) {
	if !t.Parked {
		return t, Errorf(ErrConflict, "task %s is not parked", t.ID)
	}
	return t.next(t.Status, now, t.NextTriggerAt), nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
