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
//	{"v": 1, "op": "release", "lambda": "echo", "task_id": "t1", "lease": "Q7B2..."}
//
// A claim names the delivery of the task's message it is for (the SQS receipt handle). A claim
// sent again for the same delivery, as when the Lambda client retries a call whose answer was
// lost, is answered with the same claim and lease, renewed, and counts no second attempt.
//
// A response carries the task for claim and set_result (without its payload, which the worker
// has), and for claim the lease beside it, since a task's JSON never shows its lease. Or it carries an error:
//
//	{"v": 1, "task": {"id": "t1", "status": "processing", ...}, "lease": "Q7B2..."}
//	{"v": 1, "error": {"code": "stale_lease", "message": "cannot heartbeat task t1: ..."}}
//
// Codes are not_found, conflict, stale_lease, invalid, too_large, throttled and internal; the
// Client turns each back into its task sentinel, so errors.Is(err, task.ErrStaleLease) holds on
// both sides of the call. A request of another version, or with an unknown op, gets invalid: the
// function never guesses at a contract it does not speak, and a new version is a new number.
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

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// Version is the version of the contract this package speaks.
const Version = 1

// Op is what a request asks of the status controller.
type Op string

// The ops.
const (
	OpClaim     Op = "claim"
	OpHeartbeat Op = "heartbeat"
	OpSetResult Op = "set_result"
	OpRelease   Op = "release"
)

// Request is the payload of one invocation of the status function.
type Request struct {
	V      int    `json:"v"`
	Op     Op     `json:"op"`
	Lambda string `json:"lambda"`
	TaskID string `json:"task_id"`
	Lease  string `json:"lease,omitempty"` // all but claim
	// Delivery names the message delivery a claim is for (its receipt): see Client.Claim.
	Delivery string `json:"delivery,omitempty"`

	// How the run ended, for set_result.
	Outcome status.Outcome  `json:"outcome,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// MaxDelivery bounds a claim's delivery: an SQS receipt handle is at most 1,024 characters.
const MaxDelivery = 1024

// Response is the answer to a Request: Error is set, or the op succeeded.
type Response struct {
	V     int        `json:"v"`
	Task  *task.Task `json:"task,omitempty"`  // claim and set_result
	Lease string     `json:"lease,omitempty"` // claim: task.Task keeps its lease out of JSON
	Error *Error     `json:"error,omitempty"`
}

// Error is a refusal: a code from the table below and a message for people.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// codeInternal is the code of every error that no entry of errorCodes matches.
const codeInternal = "internal"

// The one table that maps task sentinels to codes, and back.
var errorCodes = []struct {
	kind error
	code string
}{
	{task.ErrNotFound, "not_found"},
	{task.ErrConflict, "conflict"},
	{task.ErrStaleLease, "stale_lease"},
	{task.ErrInvalid, "invalid"},
	{task.ErrTooLarge, "too_large"},
	{task.ErrThrottled, "throttled"},
}

// errorOf returns the Error that answers err. Sentinel messages are written for the caller;
// anything else may carry internals, so it reads "internal error".
func errorOf(err error) *Error {
	for _, e := range errorCodes {
		if errors.Is(err, e.kind) {
			return &Error{Code: e.code, Message: err.Error()}
		}
	}
	return &Error{Code: codeInternal, Message: "internal error"}
}

// err returns the error e stands for, matching its sentinel with errors.Is.
func (e *Error) err() error {
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

// validate checks what the controller cannot: the version, the op, and that the ids and lease
// are there. The controller checks the outcome.
func (r Request) validate() error {
	switch {
	case r.V == 0:
		return task.Errorf(task.ErrInvalid, `"v" is missing: this status function speaks version %d`, Version)
	case r.V != Version:
		return task.Errorf(task.ErrInvalid, "version %d is not supported: this status function speaks version %d", r.V, Version)
	}
	switch r.Op {
	case OpClaim, OpHeartbeat, OpSetResult, OpRelease:
	default:
		return task.Errorf(task.ErrInvalid, "op %q is not one of %s, %s, %s, %s", r.Op, OpClaim, OpHeartbeat, OpSetResult, OpRelease)
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
	if r.Op != OpClaim && r.Lease == "" {
		return task.Errorf(task.ErrInvalid, "%s needs the lease that the claim returned", r.Op)
	}
	return nil
}
