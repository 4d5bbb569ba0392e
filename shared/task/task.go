package task

import (
	"encoding/json"
	"time"
)

// Status is where a task is in its life.
type Status string

// The statuses. See the package documentation for the table of next triggers.
const (
	StatusPending          Status = "pending"
	StatusNew              Status = "new"
	StatusEnqueued         Status = "enqueued"
	StatusClaimed          Status = "claimed"
	StatusProcessing       Status = "processing"
	StatusRetriableFailure Status = "retriable_failure"
	StatusSuccess          Status = "success"
	StatusFatalFailure     Status = "fatal_failure"
	StatusDead             Status = "dead"
	StatusCancelled        Status = "cancelled"
	StatusDropped          Status = "dropped"
	// StatusUpstreamFailed ends a task whose upstream did not succeed (under the trigger rule
	// all_success); its Error names the upstream and how it ended.
	StatusUpstreamFailed Status = "upstream_failed"
)

// Statuses lists every status in lifecycle order.
var Statuses = []Status{
	StatusPending, StatusNew, StatusEnqueued, StatusClaimed, StatusProcessing,
	StatusRetriableFailure, StatusSuccess, StatusFatalFailure, StatusDead, StatusCancelled, StatusDropped,
	StatusUpstreamFailed,
}

// Waiting are the statuses of tasks that have not started: gates hold or drop them.
var Waiting = []Status{StatusPending, StatusNew, StatusEnqueued, StatusRetriableFailure}

// Ended are the terminal statuses: an ended task with downstreams to tell keeps a trigger.
var Ended = []Status{StatusSuccess, StatusFatalFailure, StatusDead, StatusCancelled, StatusDropped, StatusUpstreamFailed}

// Running are the statuses of tasks owned by a worker: they time out if the worker goes silent.
var Running = []Status{StatusClaimed, StatusProcessing}

// Terminal reports whether s is final: the task will never run again.
func (s Status) Terminal() bool {
	switch s {
	case StatusSuccess, StatusFatalFailure, StatusDead, StatusCancelled, StatusDropped, StatusUpstreamFailed:
		return true
	}
	return false
}

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Task is one execution of a lambda, with everything the store keeps about it.
type Task struct {
	ID         string `json:"id"`
	Lambda     string `json:"lambda"`
	Collection string `json:"collection"`
	// Key is the task's tenant: on atf dev the queue serves keys round-robin within a priority,
	// on AWS it is the message group of an SQS fair queue. Set once, by the schedule request.
	Key         string          `json:"key,omitempty"`
	Priority    string          `json:"priority"`
	Status      Status          `json:"status"`
	Payload     json.RawMessage `json:"payload"`
	Result      json.RawMessage `json:"result"`
	Error       string          `json:"error"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`

	RunAt         time.Time  `json:"run_at"`
	Deadline      *time.Time `json:"deadline,omitempty"`
	NextTriggerAt *time.Time `json:"next_trigger_at"` // nil once terminal
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`

	// Version increases by one with every transition; writes are conditional on it.
	Version int64 `json:"version"`
	// Lease is the fencing token of the worker that owns the task (claimed or processing).
	Lease string `json:"-"`
	// Spec fingerprints the schedule request, so a replay with the same id can be told apart
	// from a different request that reuses the id.
	Spec string `json:"-"`
	// After names the upstreams the task waits for (see flow.go), in the order given. Get reads it
	// whole; GetState, GetMany, Due and List may leave it out, and Update does not write it
	// (Store.AddUpstreams does). AfterCount is its length, always there.
	After      []Ref `json:"after,omitempty"`
	AfterCount int   `json:"-"`
	// Trigger is the trigger rule (TriggerAllSuccess if empty).
	Trigger string `json:"trigger_rule,omitempty"`
	// Settled marks which upstreams (by index in After) have ended and been accounted for.
	Settled Bitmap `json:"-"`
	// Inputs are the upstreams' outcomes, in After's order: set on the task a claim hands to a
	// worker, never stored.
	Inputs []Input `json:"inputs,omitempty"`
	// Downstream marks a task that other tasks wait for: once it ends, it keeps a trigger until
	// the consumer has told them (Notified), NotifyCursor recording how far it got.
	Downstream   bool   `json:"-"`
	NotifyCursor string `json:"-"`
	// Parked marks a waiting task that the consumer set aside because a gate holds its
	// collection: stores keep it out of the sweep's range, so a held backlog costs no reads.
	// Every transition but Park clears it.
	Parked bool `json:"-"`
	// CancelRequested marks a running task whose cancel was accepted (Cancel): it stays running
	// under its lease until its executor stops the handler, and then ends cancelled, whatever
	// ends it (see CancelRunning). Every transition out of a running status clears it.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// From is the status the latest transition moved the task from (the status it had as read),
	// set by every transition and never stored: empty on a task as read or as created. A write's
	// (From, Status) says what happened, as lifecycle events need, without reading the task again.
	From Status `json:"-"`
	// NotBefore is set on a task that EnqueueAhead moved into its queue before it was due (its
	// message delayed to it): no claim takes it earlier, whatever message comes (a resend, a
	// duplicate, a stale one), and every message sent for it while enqueued is delayed to it
	// (MessageAt). Stored; cleared by the transition that takes it out of enqueued.
	NotBefore *time.Time `json:"not_before,omitempty"`
	// Nonce is set on a task whose message was sent before the task was written (SendFirst): the
	// nonce of that message (Message.Nonce). Create refuses it with ErrBuried once a claim that
	// found no task buried that nonce (Store.Bury), and a store whose due index costs writes
	// gives the task no resend trigger there: its message is on its way. Never stored as such;
	// every transition clears it.
	Nonce string `json:"-"`
	// Message is the id of the queue message (Delivery.ID, the same at every receive) that the
	// latest claim named to time its lease, and MessageFor that lease: the message stays hidden
	// in its durable queue (SQS) until the run's end is written, and its visibility, not the
	// store's due index, times the lease while the task runs under it (LeaseOnQueue). The id
	// outlives the run, so that a message times one claim at most: a claim naming it again is
	// timed by the store. Both stored; a lease written without them (by a version that knows
	// none) is the store's to time, whatever they hold.
	Message    string `json:"-"`
	MessageFor string `json:"-"`
	// Limits, set only by the transition of a claim that starts a run (the lambda's Limits), are
	// the limits the store's write of that start honours: it writes the task and takes its place
	// under each limit in one atomic write, or fails with a *Held error and writes nothing but a
	// rate's booking (RateSlot). Never stored.
	Limits Limits `json:"-"`
	// RateSlot is the start a claim held by a rate booked for the task (Limits, BookingAt): a
	// claim at or past it, within RateSlotGrace, starts the task without the rate. Written only
	// by the store's held write; it holds while the task stays enqueued, and every transition
	// out of enqueued clears it (its claim's included). Stored, and shown (read only), so that an
	// operator sees when a task a rate holds is to start.
	RateSlot *time.Time `json:"rate_slot,omitempty"`
	// HandBacks counts the claims of the current attempt handed back untried because their
	// answer never reached their worker (Unclaim): at MaxHandBacks the next is refused and the
	// attempt counts. A counted attempt (a failure, a timeout) sets it back to zero. Stored.
	HandBacks int `json:"-"`
	// Snoozes counts the runs of the task's current life that its handler snoozed (Snooze): at
	// MaxSnoozes a snooze counts as an attempt. A redrive sets it back to zero. Stored.
	Snoozes int `json:"-"`
	// AttemptSeq numbers the task's attempts over all its lives (Attempt.Number): a claim counts
	// one, a hand-back takes it back, a snooze and a redrive keep it. StartedAt and EndedAt are
	// when the latest attempt started (its claim) and ended, and Worker who ran it (the claim's
	// caller). Stored; the history (HistoryStore) keeps the attempts before.
	AttemptSeq int        `json:"-"`
	StartedAt  *time.Time `json:"-"`
	EndedAt    *time.Time `json:"-"`
	Worker     string     `json:"-"`
	// LogLocation is where the latest attempt's logs are, as its claim's caller named them (a
	// worker function: its log group and stream, and its invocation). Stored.
	LogLocation *LogLocation `json:"-"`
	// Ended is the attempt the latest transition ended, if it ended one (EnqueueAhead chained
	// after it in the same write, a retry sent ahead, keeps it): never stored as such, so never
	// read back. Update records it in the task's history; recording an attempt again (by its
	// Number) changes nothing.
	Ended *Attempt `json:"-"`
	// HeldBy is the paused gate, of its lambda or its collection, that keeps a task waiting to
	// run (Gated) from running: set by the frontend on the tasks it answers, from the gates as it
	// read them lately; never stored.
	HeldBy *Gate `json:"held_by,omitempty"`
}

// Gated reports whether gates act on a task in status s: it waits to run, not for its upstreams,
// and neither runs nor has ended.
func (s Status) Gated() bool {
	return s == StatusNew || s == StatusEnqueued || s == StatusRetriableFailure
}

// Gate modes.
const (
	GateOpen  = "open"  // tasks flow
	GatePause = "pause" // tasks wait until the gate opens again
	GateDrop  = "drop"  // waiting tasks end as dropped
)

// Gate is a switch on a lambda, or on one collection of a lambda when Collection is set.
type Gate struct {
	Lambda     string    `json:"lambda"`
	Collection string    `json:"collection,omitempty"`
	Mode       string    `json:"mode"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// GateMode returns how gates treat a task of lambda in collection: GateOpen, GatePause or
// GateDrop. The lambda's own gate, if not open, decides; otherwise the collection's.
func GateMode(gates []Gate, lambda, collection string) string {
	if g, ok := DecidingGate(gates, lambda, collection); ok {
		return g.Mode
	}
	return GateOpen
}

// DecidingGate returns the gate that is not open and decides for a task of lambda in collection,
// as GateMode tells its mode; false if the task's gates are open.
func DecidingGate(gates []Gate, lambda, collection string) (Gate, bool) {
	var decides Gate
	for _, g := range gates {
		switch {
		case g.Lambda != lambda:
		case g.Collection == "" && g.Mode != GateOpen:
			return g, true
		case g.Collection == collection && collection != "":
			decides = g
		}
	}
	return decides, decides.Mode != "" && decides.Mode != GateOpen
}
