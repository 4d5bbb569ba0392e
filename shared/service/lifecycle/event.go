// Package lifecycle publishes a task's lifecycle events (scheduled, started, succeeded, retried,
// failed, dead, cancelled, dropped, unblocked, upstream_failed) to an event bus, Amazon
// EventBridge on AWS (package eventbus) or a writer locally.
//
// Events come from the store's writes themselves: Store wraps the task.Store that a process's
// services write through and, after each successful Create, CreateBatch and Update, maps what the
// write did (the task's From and Status) to an event and hands it to a Publisher. The Publisher
// buffers events and sends them in batches from goroutines of its own, so a write waits for
// nothing but a non-blocking append; a function's handler calls Flush before its invocation
// returns (FlushAfter). Delivery and its limits are in docs/guarantees.md ("Lifecycle events").
package lifecycle

import (
	"strconv"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Source is the source of every event atf puts on a bus: a rule matches atf's events with
// {"source": ["atf"]}.
const Source = "atf"

// Type is what happened to a task.
type Type string

// The event types. The bus's detail-type of an event is "task." followed by its type
// (DetailType). Each has a JSON Schema in events/schemas/<detail-type>.json.
const (
	Scheduled      Type = "scheduled"       // created (pending, new or already enqueued)
	Started        Type = "started"         // claimed by a worker: an attempt began
	Succeeded      Type = "succeeded"       // ended success
	Retried        Type = "retried"         // an attempt failed (or timed out); another will run at run_at
	Failed         Type = "failed"          // ended fatal_failure
	Dead           Type = "dead"            // attempts or deadline used up
	Cancelled      Type = "cancelled"       // cancelled before it started
	Dropped        Type = "dropped"         // dropped by a gate
	Unblocked      Type = "unblocked"       // its upstreams ended as its trigger rule wants: it is new
	UpstreamFailed Type = "upstream_failed" // an upstream did not end as its trigger rule wants
)

// Types lists every event type.
var Types = []Type{Scheduled, Started, Succeeded, Retried, Failed, Dead, Cancelled, Dropped, Unblocked, UpstreamFailed}

// DetailType is the bus's detail-type of events of type t, such as task.succeeded.
func (t Type) DetailType() string { return "task." + string(t) }

// Event is the detail of one lifecycle event: the task as one write left it.
type Event struct {
	// ID is lambda/task_id/version: one write of a task makes at most one event, so a consumer
	// that sees an ID twice (a PutEvents retried after a lost answer) drops the second.
	ID     string `json:"event_id"`
	Type   Type   `json:"type"`
	Lambda string `json:"lambda"`
	TaskID string `json:"task_id"`
	// Collection, Priority: the task's.
	Collection string `json:"collection"`
	Priority   string `json:"priority"`
	// Status is the task's status after the write; PreviousStatus before it (absent for
	// scheduled).
	Status         task.Status `json:"status"`
	PreviousStatus task.Status `json:"previous_status,omitempty"`
	// Attempt is how many attempts have started, this one included.
	Attempt     int   `json:"attempt"`
	MaxAttempts int   `json:"max_attempts"`
	Version     int64 `json:"version"`
	// Time is when the write happened (the task's updated_at).
	Time time.Time `json:"time"`
	// RunAt is when the task is due: for scheduled, its run time; for retried and unblocked,
	// when its next attempt may run.
	RunAt *time.Time `json:"run_at,omitempty"`
	// Deadline is the task's deadline, if it has one (scheduled only).
	Deadline *time.Time `json:"deadline,omitempty"`
	// Error says why: set on retried, failed, dead, dropped and upstream_failed (at most
	// task.MaxErrorBytes).
	Error string `json:"error,omitempty"`
}

// Created returns the scheduled event of a task just created.
func Created(t task.Task) Event {
	e := of(t, Scheduled)
	e.PreviousStatus = ""
	runAt := t.RunAt.UTC()
	e.RunAt = &runAt
	if t.Deadline != nil {
		deadline := t.Deadline.UTC()
		e.Deadline = &deadline
	}
	return e
}

// Written returns the event of a write of t, the result of a transition (t.From is the status it
// moved from), and false if the write is none of the events': a heartbeat, an enqueue, a park.
func Written(t task.Task) (Event, bool) {
	typ, ok := typeOf(t.From, t.Status)
	if !ok {
		return Event{}, false
	}
	e := of(t, typ)
	switch typ {
	case Retried, Unblocked:
		if t.NextTriggerAt != nil {
			runAt := t.NextTriggerAt.UTC()
			e.RunAt = &runAt
		}
		if typ == Retried && t.Status == task.StatusEnqueued {
			// Enqueued at once, its message delayed to the retry: the event tells the retry as
			// one left waiting would, with the retry's time rather than its resend trigger.
			runAt := t.UpdatedAt.UTC()
			if t.NotBefore != nil {
				runAt = t.NotBefore.UTC()
			}
			e.Status, e.RunAt = task.StatusRetriableFailure, &runAt
		}
	case Started, Succeeded, Cancelled:
		e.Error = ""
	}
	return e, true
}

// typeOf maps a write from status from to status to to its event type. A write that keeps the
// status (a heartbeat, a park, telling downstreams) is no event, nor is one from an unknown
// status (a task written as read, not through a transition).
func typeOf(from, to task.Status) (Type, bool) {
	if from == "" || from == to {
		return "", false
	}
	running := from == task.StatusClaimed || from == task.StatusProcessing
	switch to {
	case task.StatusClaimed, task.StatusProcessing:
		if !running {
			return Started, true
		}
	case task.StatusSuccess:
		return Succeeded, true
	case task.StatusRetriableFailure:
		return Retried, true
	case task.StatusEnqueued:
		if running { // a retry sent ahead in the write that ended the run (task.EnqueueAhead)
			return Retried, true
		}
	case task.StatusFatalFailure:
		return Failed, true
	case task.StatusDead:
		return Dead, true
	case task.StatusCancelled:
		return Cancelled, true
	case task.StatusDropped:
		return Dropped, true
	case task.StatusUpstreamFailed:
		return UpstreamFailed, true
	case task.StatusNew:
		if from == task.StatusPending {
			return Unblocked, true
		}
	}
	// new from enqueued (a claim's gate held it) or from running (released untried), enqueued,
	// pending (upstreams added): the task waits as before.
	return "", false
}

func of(t task.Task, typ Type) Event {
	return Event{
		ID:   t.Lambda + "/" + t.ID + "/" + strconv.FormatInt(t.Version, 10),
		Type: typ, Lambda: t.Lambda, TaskID: t.ID, Collection: t.Collection, Priority: t.Priority,
		Status: t.Status, PreviousStatus: t.From, Attempt: t.Attempts, MaxAttempts: t.MaxAttempts,
		Version: t.Version, Time: t.UpdatedAt.UTC(), Error: t.Error,
	}
}
