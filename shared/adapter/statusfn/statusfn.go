// Package statusfn carries the heartbeat and status controller over AWS Lambda Invoke: a Handler
// that the status function runs, and a Client that workers use as their executor.Status.
//
// # The contract (version 1)
//
// A request names the op, the task and, except for a claim, the lease the claim returned:
//
//	{"v": 1, "op": "claim", "lambda": "echo", "task_id": "t1", "delivery": "AQEB..."}
//	{"v": 1, "op": "heartbeat", "lambda": "echo", "task_id": "t1", "lease": "Q7B2..."}
//	{"v": 1, "op": "set_result", "lambda": "echo", "task_id": "t1", "lease": "Q7B2...",
//	 "outcome": "success", "result": {"hi": "there"}}
//	{"v": 1, "op": "set_result", ..., "outcome": "retriable", "error": "upstream timed out"}
//	{"v": 1, "op": "set_result", ..., "outcome": "retriable", "error": "rate limited", "delay": "30s"}
//	{"v": 1, "op": "set_result", ..., "outcome": "snoozed", "delay": "5m"}
//	{"v": 1, "op": "release", "lambda": "echo", "task_id": "t1", "lease": "Q7B2..."}
//	{"v": 1, "op": "unclaim", "lambda": "echo", "task_id": "t1", "delivery": "AQEB...", "token": "M4X..."}
//
// A claim names the delivery of the task's message it is for (the SQS receipt handle), and a
// token that the worker picks at random for the claim call. A claim sent again with the same
// delivery and token, as when the Lambda client retries a call whose answer was lost, is
// answered with the same claim and lease, renewed, and counts no second attempt; one with the
// same delivery and another token (a batch processed twice) conflicts. An unclaim names the
// delivery and token of a claim that failed at the worker without a refusal (no answer came): if
// that claim was written all the same, it is handed back untried (status.Controller.Unclaim),
// and answered stale_lease if it was not, conflict once the attempt's claims were handed back
// task.MaxHandBacks times. A claim without a token (a worker older than tokens) is served as
// before, its lease the delivery's alone; an unclaim without one is refused as invalid, since
// every tokenless caller of a delivery shares that lease. A function older than unclaim answers
// it invalid too, and one older than tokens ignores the token; in both cases the claim, if
// written, is counted at its heartbeat timeout as before.
//
// A delay (a Go duration) is when the handler asked to run again: with retriable, the next
// attempt comes after it instead of the backoff (task.RetryAfter); snoozed needs one, and counts
// no attempt (task.Snooze). A function older than these refuses snoozed as invalid (the run then
// counts at its heartbeat timeout), and ignores a delay: its retry waits the backoff.
//
// A response carries the task for claim and set_result (without its payload, which the worker
// has), and for claim the lease beside it, since a task's JSON never shows its lease. Or it carries an error:
//
//	{"v": 1, "task": {"id": "t1", "status": "processing", ...}, "lease": "Q7B2..."}
//	{"v": 1, "error": {"code": "stale_lease", "message": "cannot heartbeat task t1: ..."}}
//
// Codes are not_found, conflict, stale_lease, invalid, too_large, throttled, cancelled (a
// heartbeat of a task cancelled while it runs: stop the handler and report the outcome
// cancelled, {"v": 1, "op": "set_result", ..., "outcome": "cancelled"}), not_due (a claim too
// early, with until when if that is known, {"code": "not_due", ..., "until": "..."}), held (a
// claim that a lambda's limit holds back, which started nothing: the error names the limit and,
// if it knows, until when, and the worker hides the message until then,
// {"code": "held", "message": "...", "limit": "rate", "until": "2026-11-28T12:00:00.2Z"}) and
// internal; the Client turns each back into its task sentinel, so errors.Is(err,
// task.ErrStaleLease) holds on both sides of the call, held into a *task.Held and not_due with
// its until into a *task.Early. A request of another version, or with an unknown op, gets invalid: the
// function never guesses at a contract it does not speak, and a new version is a new number.
//
// # Batches (version 2)
//
// One invocation may carry many requests, each a request of version 1 as above, answered by as
// many responses in the same order, each with its own error:
//
//	{"v": 2, "requests": [{"v": 1, "op": "claim", ...}, {"v": 1, "op": "heartbeat", ...}]}
//	{"v": 2, "responses": [{"v": 1, "task": {...}, "lease": "Q7B2..."}, {"v": 1, "error": {...}}]}
//
// So one task's refusal never fails another's request. The function serves a batch's requests
// at once (up to batchConcurrency of them), checks each as it checks a single request (the one
// lambda of NewLambdaHandler included), and refuses as invalid, as a whole, a batch that is
// empty, holds more than MaxBatchRequests, holds a batch, or sets any field beside "requests".
// A set_result answered in a batch carries the task without its result, which the worker has:
// the answer stays small. A claim's answer carries the payload and the upstreams' results
// (up to task.MaxInputBytes), so a few large claims could pass Lambda's 6 MB response limit:
// the function then answers the largest claims with the code resend_alone instead, and the
// Client sends each of those again alone, which the controller answers with the same claim
// (claims are idempotent per delivery; a claim that names none is never answered so). A single request of version 1 is served as before.
//
// The store's counts of a batch's moves are written summed, one write per counter item they
// touch, once its requests are served and before it is answered (task.GatherCounts). The
// function logs one record per batch, its summary ("status batch done": requests, ok, refused,
// failed), and one per refusal, failure, failed run's result, release and unclaim; a claim, a
// heartbeat or a success served, and a claim held by a limit, is logged at debug only.
//
// # Coalescing
//
// The Client gathers the calls its executors make at the same moment into one invocation: a call
// waits at most Linger (a few milliseconds) for others, or until the batch holds MaxBatchRequests
// or would pass Lambda's request limit. The records of one SQS batch are claimed together, so
// their claims share an invocation; their answers come back together, so their runs start
// together, and their heartbeats, which tick from that start, share one too; handlers that end
// together share one result invocation. A call whose context ends before its batch goes is left
// out of it. Each caller gets its answer, or its own context's error at its own deadline, even
// while the invocation that carries its request is still out. The invocation itself lasts until
// the latest deadline among its callers, and is cancelled when all of them have given up.
//
// Lingering cannot break the lease argument of docs/guarantees.md: the executor takes a
// heartbeat's send time before it calls the Client, the status controller writes the heartbeat
// later by its own clock, and a later write only moves the task's trigger later. It costs only
// liveness, as latency does: a status function answering in L keeps runs alive while
// max(I, L + Linger) + L + Linger < T − M.
//
// A function older than version 2 refuses a batch with a version 1 invalid error; the Client then
// sends every call alone from that moment on, so workers may be deployed before their function.
//
// On AWS each lambda has a status function of its own, which only its worker may invoke, and
// whose Handler (NewLambdaHandler) refuses as invalid a request naming another lambda.
//
// # Why errors travel in the body
//
// An error returned to the Lambda runtime becomes a function error, the same as a crash or a
// timeout. A worker must tell them apart: a stale lease means stop the handler now, while a
// broken call is only a missed heartbeat. So every answer of the controller, refusals included,
// is a successful invocation with the error in the response, and a function error always means
// the function itself failed. Errors the contract has no code for read "internal error" and are
// logged by the function, never sent.
package statusfn

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// Version is the version of a single request and of its response.
const Version = 1

// BatchVersion is the version of a batch: a list of requests of Version, answered by a list of
// responses. The function speaks both.
const BatchVersion = 2

// MaxBatchRequests is the most requests one batch may hold.
const MaxBatchRequests = 100

// Op is what a request asks of the status controller.
type Op string

// The ops.
const (
	OpClaim     Op = "claim"
	OpHeartbeat Op = "heartbeat"
	OpSetResult Op = "set_result"
	OpRelease   Op = "release"
	OpUnclaim   Op = "unclaim"
)

// Request is the payload of one invocation of the status function.
type Request struct {
	V      int    `json:"v"`
	Op     Op     `json:"op"`
	Lambda string `json:"lambda"`
	TaskID string `json:"task_id"`
	Lease  string `json:"lease,omitempty"` // all but claim and unclaim
	// Delivery names the message delivery a claim or an unclaim is for (its receipt), and Token
	// the claim call that made it: see Client.Claim.
	Delivery string `json:"delivery,omitempty"`
	Token    string `json:"token,omitempty"`
	// Nonce is that of the message a claim is for, if it was sent before its task was written
	// (status.WithNonce): a claim that finds no task buries it.
	Nonce string `json:"nonce,omitempty"`
	// MessageID is the queue's id of the message a claim is for, if its caller keeps it hidden
	// until the run's end is written (status.WithMessage): its visibility times the lease.
	MessageID string `json:"message_id,omitempty"`
	// BudgetMS is how long, in milliseconds, a claim's caller waits for its answer, as it sent
	// the claim (0: unknown): the claim's wait for its task's create takes at most half of it
	// (status.Controller.Claim), so that it does not claim, under a lease nobody holds, a task
	// for a worker that gave up; the other half covers the invocation's way there and back.
	BudgetMS int64 `json:"budget_ms,omitempty"`
	// Worker names the executor that claims, for the attempt's history (status.WithWorker), and
	// LogLocation where its logs are (status.WithLogLocation).
	Worker      string            `json:"worker,omitempty"`
	LogLocation *task.LogLocation `json:"log_location,omitempty"`

	// How the run ended, for set_result.
	Outcome status.Outcome  `json:"outcome,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   string          `json:"error,omitempty"`
	// Delay, a Go duration, is when to run again (status.Result.Delay).
	Delay string `json:"delay,omitempty"`

	// Requests are the requests of a batch (version 2), which sets no other field.
	Requests []Request `json:"requests,omitempty"`
}

// MaxDelivery bounds a claim's delivery: an SQS receipt handle is at most 1,024 characters.
const MaxDelivery = 1024

// MaxToken bounds a claim's token, and its message's nonce and id (an SQS message id is 36): the executor's tokens and the
// frontend's nonces are 26 characters (task.NewLease, task.SendFirst).
const MaxToken = 64

// Response is the answer to a Request: Error is set, or the op succeeded.
type Response struct {
	V     int        `json:"v"`
	Task  *task.Task `json:"task,omitempty"`  // claim and set_result
	Lease string     `json:"lease,omitempty"` // claim: task.Task keeps its lease out of JSON
	Error *Error     `json:"error,omitempty"`

	// Responses answer a batch's requests, in their order.
	Responses []Response `json:"responses,omitempty"`
}

// Error is a refusal: a code from the table below and a message for people.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Limit and Until say, for the code held, which limit holds the claim back and until when
	// it may let the task start (task.Held; Until is absent when none is given). For the code
	// not_due, Until is when the claim may be tried again, if that is known (task.Early).
	Limit string     `json:"limit,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

// codeInvalid is the code of task.ErrInvalid.
const codeInvalid = "invalid"

// codeInternal is the code of every error that no entry of errorCodes matches.
const codeInternal = "internal"

// codeResendAlone answers a request of a batch whose answer did not fit in the batch's response:
// the Client sends it again alone. Only a claim gets it, since only a claim is answered the same
// when it is sent again.
const codeResendAlone = "resend_alone"

// The one table that maps task sentinels to codes, and back.
var errorCodes = []struct {
	kind error
	code string
}{
	{task.ErrNotFound, "not_found"},
	{task.ErrConflict, "conflict"},
	{task.ErrStaleLease, "stale_lease"},
	{task.ErrInvalid, codeInvalid},
	{task.ErrTooLarge, "too_large"},
	{task.ErrThrottled, "throttled"},
	{task.ErrCancelled, codeCancelled},
	// A claim before its task's NotBefore, or of the message that times a running task's lease
	// before the lease ends, with until when (task.Early): the worker hides the message until
	// then. A worker older than until reads it as a failed claim, and its message comes back
	// after its retry delay.
	{task.ErrNotDue, codeNotDue},
	// A claim that a limit holds back (task.Held), with its limit and until when: the worker
	// hides the message until then. A worker older than the code reads it as a failed claim, and
	// its message comes back after its retry delay, to be held again.
	{task.ErrHeld, codeHeld},
}

// codeNotDue answers a claim that came too early (task.ErrNotDue).
const codeNotDue = "not_due"

// codeHeld answers a claim that a limit holds back (task.ErrHeld).
const codeHeld = "held"

// codeCancelled answers a heartbeat of a task cancelled while it runs (task.ErrCancelled): the
// worker stops its handler and reports the outcome cancelled. A worker older than the code reads
// it as a failed heartbeat, stops its handler after task.MaxMissedHeartbeats of them, and the task
// ends cancelled at its timeout.
const codeCancelled = "cancelled"

// errorOf returns the Error that answers err. Sentinel messages are written for the caller;
// anything else may carry internals, so it reads "internal error".
func errorOf(err error) *Error {
	for _, e := range errorCodes {
		if errors.Is(err, e.kind) {
			out := &Error{Code: e.code, Message: err.Error()}
			if h := (*task.Held)(nil); errors.As(err, &h) {
				out.Limit = h.Limit
				if !h.Until.IsZero() {
					until := h.Until.UTC()
					out.Until = &until
				}
			}
			if until, ok := task.DueAt(err); ok {
				until = until.UTC()
				out.Until = &until
			}
			return out
		}
	}
	return &Error{Code: codeInternal, Message: "internal error"}
}

// err returns the error e stands for, matching its sentinel with errors.Is.
func (e *Error) err() error {
	if e.Code == codeHeld {
		h := &task.Held{Limit: e.Limit}
		if e.Until != nil {
			h.Until = *e.Until
		}
		return heldError{held: h, msg: e.Message}
	}
	if e.Code == codeNotDue && e.Until != nil {
		return &task.Early{Until: *e.Until, Msg: e.Message}
	}
	for _, c := range errorCodes {
		if c.code == e.Code {
			return task.Errorf(c.kind, "%s", e.Message)
		}
	}
	if e.Code == codeInternal {
		return errors.New("status function: " + e.Message)
	}
	return fmt.Errorf("status function: %s (code %q)", e.Message, e.Code)
}

// heldError is a held claim as it came back: a *task.Held (errors.As), with the function's message.
type heldError struct {
	held *task.Held
	msg  string
}

func (e heldError) Error() string { return e.msg }
func (e heldError) Unwrap() error { return e.held }

// validate checks what the controller cannot: the version, the op, and that the ids and lease
// are there. The controller checks the outcome.
func (r Request) validate() error {
	switch {
	case r.V == 0:
		return task.Errorf(task.ErrInvalid, `"v" is missing: this status function speaks version %d`, Version)
	case r.V == BatchVersion:
		return task.Errorf(task.ErrInvalid, "version %d is a batch, and batches do not nest: each of its requests is of version %d", BatchVersion, Version)
	case r.V != Version:
		return task.Errorf(task.ErrInvalid, "version %d is not supported: this status function speaks version %d", r.V, Version)
	}
	switch r.Op {
	case OpClaim, OpHeartbeat, OpSetResult, OpRelease, OpUnclaim:
	default:
		return task.Errorf(task.ErrInvalid, "op %q is not one of %s, %s, %s, %s, %s", r.Op, OpClaim, OpHeartbeat, OpSetResult, OpRelease, OpUnclaim)
	}
	if err := task.ValidateName("lambda", r.Lambda); err != nil {
		return err
	}
	if err := task.ValidateID("task_id", r.TaskID); err != nil {
		return err
	}
	if len(r.Delivery) > MaxDelivery {
		return task.Errorf(task.ErrInvalid, "delivery is %d bytes; at most %d", len(r.Delivery), MaxDelivery)
	}
	if len(r.Token) > MaxToken {
		return task.Errorf(task.ErrInvalid, "token is %d bytes; at most %d", len(r.Token), MaxToken)
	}
	if r.BudgetMS < 0 {
		return task.Errorf(task.ErrInvalid, "budget_ms is %d; want 0 or more", r.BudgetMS)
	}
	if len(r.Nonce) > MaxToken {
		return task.Errorf(task.ErrInvalid, "nonce is %d bytes; at most %d", len(r.Nonce), MaxToken)
	}
	if len(r.MessageID) > MaxToken {
		return task.Errorf(task.ErrInvalid, "message_id is %d bytes; at most %d", len(r.MessageID), MaxToken)
	}
	switch {
	case r.Op == OpUnclaim && (r.Delivery == "" || r.Token == ""):
		return task.Errorf(task.ErrInvalid, "%s needs the delivery and the token that the claim was made with", r.Op)
	case r.Op != OpClaim && r.Op != OpUnclaim && r.Lease == "":
		return task.Errorf(task.ErrInvalid, "%s needs the lease that the claim returned", r.Op)
	}
	if len(r.Requests) > 0 {
		return task.Errorf(task.ErrInvalid, `"requests" makes a batch, of version %d`, BatchVersion)
	}
	return nil
}

// validateBatch checks the envelope of a batch; validate checks each of its requests.
func (r Request) validateBatch() error {
	switch {
	case len(r.Requests) == 0:
		return task.Errorf(task.ErrInvalid, `a batch (version %d) needs its "requests"`, BatchVersion)
	case len(r.Requests) > MaxBatchRequests:
		return task.Errorf(task.ErrInvalid, "a batch holds at most %d requests, not %d", MaxBatchRequests, len(r.Requests))
	case r.Op != "" || r.Lambda != "" || r.TaskID != "" || r.Lease != "" || r.Delivery != "" ||
		r.Outcome != "" || r.Result != nil || r.Error != "" || r.Delay != "":
		return task.Errorf(task.ErrInvalid, `a batch (version %d) sets "requests" only`, BatchVersion)
	}
	return nil
}
