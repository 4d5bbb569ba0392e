// Package metrics observes what atf does, for operators: tasks moving between statuses, how late
// tasks start after they are due (delivery latency), how long handlers run, how long the
// consumer's passes take, and the store's errors. A Recorder takes them: Prometheus under
// `atf dev` (package prommetrics, served at /metrics), CloudWatch Embedded Metric Format on AWS
// (package emf).
//
// Most of it comes from the store's writes themselves, as lifecycle events do: Store wraps the
// task.Store a process's services write through and tells its Recorder what each successful write
// did (the task's From and Status) and which calls failed for a reason of the store's own. The
// executor (handler durations) and the consumer (pass durations) take a Recorder in their Config.
// Store also names the lambda of each call in its context (WithLambda), so that the DynamoDB
// store's capacity units reach the Recorder by lambda (Consumed).
package metrics

import (
	"context"
	"time"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
)

// Recorder takes the metrics. Its methods run on the task path, after a store write or a
// handler's end: they must not block, nor call anything remote.
type Recorder interface {
	// Transitions counts n tasks of lambda that one write moved from status from to status to;
	// from is empty for tasks created. event is the lifecycle event the write makes, or empty
	// for one that makes none (an enqueue, a release).
	Transitions(lambda string, from, to task.Status, event lifecycle.Type, n int)
	// Delivery observes how long after it was due a task's first attempt was claimed.
	Delivery(lambda string, latency time.Duration)
	// HandlerRan observes one run of a handler and how it ended (a status.Outcome, or
	// OutcomeStopped).
	HandlerRan(lambda, outcome string, took time.Duration)
	// Pass observes one pass of the consumer over one lambda, and whether it failed.
	Pass(lambda string, took time.Duration, failed bool)
	// StoreError counts a store call op (a task.Store method, such as Update) that failed for a
	// reason of the store's own: kind is one of the Kind constants.
	StoreError(op string, kind Kind)
	// Consumed adds capacity units that the store's calls for lambda consumed, as the store
	// itself reports them (dynamostore.ReportConsumed: DynamoDB's own figures). lambda is the one
	// Store named in the call's context (LambdaOf), empty for a call of no single lambda.
	Consumed(lambda string, u cost.Units)
	// Held counts a claim of lambda's that a limit held back (task.Held: limit is its Limit): the
	// task waits, with no attempt counted.
	Held(lambda, limit string)
}

// OutcomeStopped is the outcome of a handler run that the executor stopped because its lease was
// lost, or because the executor shut down: no result was reported.
const OutcomeStopped = "stopped"

// Kind says why a store call failed.
type Kind string

// The kinds of store errors. An answer about the task (not found, a conflict, a stale lease, bad
// input) is no store error: it is the store doing its job.
const (
	KindThrottled   Kind = "throttled"    // task.ErrThrottled: over the table's capacity
	KindStorageFull Kind = "storage_full" // task.ErrStorageFull: no room left
	KindTimeout     Kind = "timeout"      // the call's deadline passed
	KindOther       Kind = "other"        // anything else: the store is unreachable or broken
)

// Kinds are the kinds of store errors, in the order above.
var Kinds = []Kind{KindThrottled, KindStorageFull, KindTimeout, KindOther}

// Nop is a Recorder that records nothing.
type Nop struct{}

func (Nop) Transitions(string, task.Status, task.Status, lifecycle.Type, int) {}
func (Nop) Delivery(string, time.Duration)                                    {}
func (Nop) HandlerRan(string, string, time.Duration)                          {}
func (Nop) Pass(string, time.Duration, bool)                                  {}
func (Nop) StoreError(string, Kind)                                           {}
func (Nop) Consumed(string, cost.Units)                                       {}
func (Nop) Held(string, string)                                               {}

var _ Recorder = Nop{}

// Tee is a Recorder that tells each of its Recorders everything, in order.
type Tee []Recorder

func (t Tee) Transitions(lambda string, from, to task.Status, event lifecycle.Type, n int) {
	for _, r := range t {
		r.Transitions(lambda, from, to, event, n)
	}
}

func (t Tee) Delivery(lambda string, latency time.Duration) {
	for _, r := range t {
		r.Delivery(lambda, latency)
	}
}

func (t Tee) HandlerRan(lambda, outcome string, took time.Duration) {
	for _, r := range t {
		r.HandlerRan(lambda, outcome, took)
	}
}

func (t Tee) Pass(lambda string, took time.Duration, failed bool) {
	for _, r := range t {
		r.Pass(lambda, took, failed)
	}
}

func (t Tee) StoreError(op string, kind Kind) {
	for _, r := range t {
		r.StoreError(op, kind)
	}
}

func (t Tee) Consumed(lambda string, u cost.Units) {
	for _, r := range t {
		r.Consumed(lambda, u)
	}
}

func (t Tee) Held(lambda, limit string) {
	for _, r := range t {
		r.Held(lambda, limit)
	}
}

var _ Recorder = Tee{}

type lambdaKey struct{}

// WithLambda returns ctx naming the lambda whose tasks a store call serves, so that a store that
// reports what each call consumed can tell the lambdas apart (LambdaOf). Store names it on every
// call of a single lambda.
func WithLambda(ctx context.Context, lambda string) context.Context {
	return context.WithValue(ctx, lambdaKey{}, lambda)
}

// LambdaOf returns the lambda that ctx names (WithLambda), or "".
func LambdaOf(ctx context.Context) string {
	l, _ := ctx.Value(lambdaKey{}).(string)
	return l
}

// lambdaOf returns the lambda of n items, by item i's, if they all have the same; "" otherwise.
func lambdaOf(n int, lambda func(i int) string) string {
	if n == 0 {
		return ""
	}
	first := lambda(0)
	for i := 1; i < n; i++ {
		if lambda(i) != first {
			return ""
		}
	}
	return first
}
