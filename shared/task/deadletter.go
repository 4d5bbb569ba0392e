package task

import (
	"context"
	"fmt"
	"time"
)

// MaxDeadLetterTrips is how many times in a row the messages of one task may go to a dead-letter
// queue before the drain ends the task as dead (DeadLettered).
const MaxDeadLetterTrips = 3

// DeadLettered handles an enqueued task whose queue message went to a dead-letter queue: it was
// received the queue's MaxReceiveCount times, and no claim of it was ever settled (a claim
// settled either way deletes it). trips counts this trip and those of the messages the drain
// sent before it for the task, in a row.
//
// Below MaxDeadLetterTrips the task runs again: it stays enqueued, due for a resend an enqueue
// timeout from now, as after Enqueue, and the caller sends its message (Message, with
// DeadLetterTrips set to trips) at once. At MaxDeadLetterTrips it is dead, saying why: its
// messages keep failing, so something about the task (not a passing outage) stops its claims,
// and people should look at it before they redrive it.
//
// A task in any other status is not the message's any more (it was claimed, or enqueued again
// and claimed, or it ended): ErrConflict, and the caller deletes the message. So is a parked
// task: the gate that holds it enqueues it once it opens.
func DeadLettered(t Task, trips int, now time.Time, c Config) (Task, error) {
	if err := notFrom(t, "redeliver", StatusEnqueued); err != nil {
		return t, err
	}
	if t.Parked {
		return t, Errorf(ErrConflict, "task %s is held by a gate", t.ID)
	}
	if trips >= MaxDeadLetterTrips {
		t = t.next(StatusDead, now, nil)
		t.Error = fmt.Sprintf("its queue messages went to the dead-letter queue %d times in a row: received again and again, never claimed (workers crashed on it, or its claims failed); look into it, then redrive it", trips)
		return t, nil
	}
	return t.next(StatusEnqueued, now, at(now.Add(c.EnqueueTimeout))), nil
}

// DeadLetterQueue is a Queue whose queues each have a dead-letter queue, where a message received
// too often without being deleted goes (sqsqueue). The drain reads them (consumer.Drain).
type DeadLetterQueue interface {
	// ReceiveDead takes up to p.Max messages from the dead-letter queue of p's lambda and
	// priority, waiting up to p.Wait for the first, and hides them for p.Visibility.
	ReceiveDead(ctx context.Context, p ReceiveParams) ([]DeadLetter, error)
	// DeleteDead removes a message ReceiveDead returned.
	DeleteDead(ctx context.Context, d Delivery) error
}

// DeadLetter is a message received from a dead-letter queue: a task's, or poison (a body that is
// no task message of its queue; TaskID is then empty and Poison holds the body's head).
type DeadLetter struct {
	Delivery
	Poison string
	Why    string // why the body is poison
}
