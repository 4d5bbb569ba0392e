package executor

import (
	"time"

	"github.com/openatf/atf/shared/task"
)

// A task whose claim a limit holds back (task.ErrHeld) waits in its queue, not in a worker's
// slot: the claim counted no attempt and wrote no lease (a rate's hold books the task's slot,
// nothing more), so its message is still the task's, and the worker hides it until the limit may
// let the task start (HoldDelay): for a rate, until the slot it booked. Workers then fail the
// record, or leave the message undeleted, as for any claim that did not settle.
const (
	// HoldBackoffBase and HoldBackoffMax time the return of a message held by a concurrency cap,
	// which cannot know when a slot frees: a second, doubled on each receive, at most four. A
	// waiting task then starts within about four seconds of a slot freeing, at the cost of a
	// claim (a status call and a store read) every four seconds per waiting task; a longer cap
	// would save claims but add its length to every wait.
	HoldBackoffBase = time.Second
	HoldBackoffMax  = 4 * time.Second
	// MaxHold bounds a hold: SQS delays a sent message by 15 minutes at most. A task held for
	// longer (a slow rate) is claimed again each MaxHold, and held again until its time.
	MaxHold = 15 * time.Minute
	// HoldResendAt is the receive count from which a held message is sent again afresh (delayed
	// by its hold), and the one received deleted, rather than hidden: every receive raises the
	// count, and at the queue's maxReceiveCount (sqsqueue.DefaultMaxReceiveCount, ten) SQS would
	// move it to the dead-letter queue, whose drain counts a trip towards the task's death
	// (task.DeadLettered). Half of it leaves the other half to the receives that transient
	// failures take; a fresh message starts its count again at one.
	HoldResendAt = 5
)

// DueDelay is how long a message whose claim was refused as early stays hidden: until its task
// is due (task.DueAt), a second at least (a queue hides for whole seconds, and our clock may be
// past it already), never more than MaxHold.
func DueDelay(due, now time.Time) time.Duration {
	return min(max(due.Sub(now), time.Second), MaxHold)
}

// HoldDelay is how long the message of a claim held by err (task.ErrHeld), received for the
// receiveCount-th time, stays hidden: until the hold's Until if it gives one (a rate), at least
// zero; otherwise (a concurrency cap) HoldBackoffBase doubled on each receive after the first, at
// most HoldBackoffMax. Never more than MaxHold.
func HoldDelay(err error, receiveCount int, now time.Time) time.Duration {
	if until, ok := task.HeldUntil(err); ok {
		return min(max(until.Sub(now), 0), MaxHold)
	}
	d := HoldBackoffBase
	for i := 1; i < receiveCount && d < HoldBackoffMax; i++ {
		d *= 2
	}
	return min(d, HoldBackoffMax)
}

// HoldResend reports whether a held message received for the receiveCount-th time is sent again
// afresh rather than hidden (HoldResendAt).
func HoldResend(receiveCount int) bool { return receiveCount >= HoldResendAt }

// Resent is the message to send again for a held delivery's message m: the same, delayed by d.
// Its RunAt is dropped: the claim found the task due (a hold comes after that check), and a
// message that carries one has its delay rounded down by SQS (sqsqueue), so it would come back
// before its hold is over.
func Resent(m task.Message, d time.Duration) task.Message {
	m.Delay, m.RunAt = d, nil
	return m
}
