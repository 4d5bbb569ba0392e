package status

import (
	"context"
	"strings"

	"github.com/openatf/atf/shared/task"
)

// MaxWorkerName bounds the name a claim records for its worker: longer ones are cut to it.
const MaxWorkerName = 128

type workerKey struct{}

// WithWorker returns ctx carrying the name of the worker that makes the calls under it (an
// executor: its process, or its function invocation), which a claim records as its attempt's
// worker (task.Attempt.Worker). A claim that crosses a process carries it in its request
// (statusfn).
func WithWorker(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, workerKey{}, name)
}

// WorkerOf is the worker name ctx carries, cut to MaxWorkerName bytes, or "".
func WorkerOf(ctx context.Context) string {
	name, _ := ctx.Value(workerKey{}).(string)
	if len(name) > MaxWorkerName {
		name = strings.ToValidUTF8(name[:MaxWorkerName], "")
	}
	return name
}

type logLocationKey struct{}

// WithLogLocation returns ctx carrying where the logs of the worker that makes the calls under it
// are (a worker function's log group and stream, and its invocation), which a claim records
// with its attempt (task.Attempt.LogLocation). A claim that crosses a process carries it in its
// request (statusfn).
func WithLogLocation(ctx context.Context, l *task.LogLocation) context.Context {
	return context.WithValue(ctx, logLocationKey{}, l)
}

// LogLocationOf is the log location ctx carries, each field cut to task.MaxLogName bytes, or nil.
func LogLocationOf(ctx context.Context) *task.LogLocation {
	l, _ := ctx.Value(logLocationKey{}).(*task.LogLocation)
	return l.Bounded()
}

type nonceKey struct{}

// WithNonce returns ctx carrying the nonce of the message a claim under it is for
// (task.Message.Nonce), so that a claim that finds no task buries it (task.Store.Bury). A claim
// that crosses a process carries it in its request (statusfn).
func WithNonce(ctx context.Context, nonce string) context.Context {
	return context.WithValue(ctx, nonceKey{}, nonce)
}

// NonceOf is the message nonce ctx carries, or "".
func NonceOf(ctx context.Context) string {
	nonce, _ := ctx.Value(nonceKey{}).(string)
	return nonce
}

type stateKey struct{}

// WithState returns ctx carrying the task as its message's sender wrote it (task.Message.State),
// if t is not nil: a claim under it starts from it rather than from a read (Claimer).
func WithState(ctx context.Context, t *task.Task) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, stateKey{}, t)
}

// StateOf is the task state ctx carries for the task lambda/id, or nil.
func StateOf(ctx context.Context, lambda, id string) *task.Task {
	t, _ := ctx.Value(stateKey{}).(*task.Task)
	if t == nil || t.Lambda != lambda || t.ID != id {
		return nil
	}
	return t
}

type messageKey struct{}

// WithMessage returns ctx carrying the id of the queue message a claim under it is for
// (task.Delivery.ID), when its caller keeps that message hidden in its durable queue until the
// run's end is written: the message's visibility then times the lease (task.Task.Message), and
// its return times the attempt out. A claim that crosses a process carries it in its request
// (statusfn).
func WithMessage(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, messageKey{}, id)
}

// MessageOf is the message id ctx carries, or "".
func MessageOf(ctx context.Context) string {
	id, _ := ctx.Value(messageKey{}).(string)
	return id
}
