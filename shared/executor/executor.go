// Package executor runs one claimed task: it starts the handler, heartbeats while it runs, and
// reports the outcome. It keeps the no-concurrent-execution guarantee on its side: after
// task.MaxMissedHeartbeats failed heartbeats in a row (or one that says the lease is gone) it stops
// the handler, because it can no longer prove it owns the task. The heartbeat timeout exceeds
// that many intervals, so the handler is stopped before anyone else may claim the task.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/openatf/atf/shared/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// Status is the heartbeat and status controller as an executor sees it: in-process locally
// (*status.Controller), a function invocation on AWS.
type Status interface {
	Claim(ctx context.Context, lambda, id string) (task.Task, error)
	Heartbeat(ctx context.Context, lambda, id, lease string) error
	SetResult(ctx context.Context, lambda, id, lease string, r status.Result) (task.Task, error)
	Release(ctx context.Context, lambda, id, lease string) error
}

var _ Status = (*status.Controller)(nil)

// reportTimeout bounds the final result or release call, which runs even during shutdown.
const reportTimeout = 10 * time.Second

// Executor runs claimed tasks.
type Executor struct {
	status   Status
	interval time.Duration
	log      *slog.Logger
}

// New returns an Executor that heartbeats every interval (task.DefaultHeartbeatInterval if zero).
func New(s Status, interval time.Duration, log *slog.Logger) *Executor {
	if interval <= 0 {
		interval = task.DefaultHeartbeatInterval
	}
	if log == nil {
		log = slog.Default()
	}
	return &Executor{status: s, interval: interval, log: log}
}

// errLeaseLost is the cause given to a handler's context when the executor stops it.
var errLeaseLost = errors.New("lease lost: heartbeats failed, another worker may run the task")

// Run runs the claimed task t with h, bounded by l.Timeout. Cancelling ctx means the executor is
// shutting down: the handler is stopped and the task released, untried, for another worker.
func (e *Executor) Run(ctx context.Context, l task.Lambda, h worker.Handler, t task.Task) {
	log := e.log.With("lambda", t.Lambda, "task_id", t.ID, "attempt", t.Attempts)
	if err := e.status.Heartbeat(ctx, t.Lambda, t.ID, t.Lease); err != nil {
		// Not started: the claim timeout hands the task to someone else.
		log.Warn("could not start task", "err", err)
		return
	}

	hctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	hctx, cancelTimeout := context.WithTimeoutCause(hctx, l.Timeout, fmt.Errorf("handler timed out after %s", l.Timeout))
	defer cancelTimeout()
	type outcome struct {
		result []byte
		err    error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := worker.Run(hctx, h, worker.Task{
			ID: t.ID, Lambda: t.Lambda, Collection: t.Collection, Priority: t.Priority,
			Attempt: t.Attempts, Payload: t.Payload,
		})
		done <- outcome{r, err}
	}()

	ticker := time.NewTicker(e.interval)
	defer ticker.Stop()
	missed := 0
	for {
		select {
		case <-ticker.C:
			err := e.status.Heartbeat(ctx, t.Lambda, t.ID, t.Lease)
			switch {
			case err == nil:
				missed = 0
			case errors.Is(err, task.ErrStaleLease):
				missed = task.MaxMissedHeartbeats
			default:
				missed++
			}
			if err != nil {
				log.Warn("heartbeat failed", "err", err, "missed", missed)
			}
			if missed >= task.MaxMissedHeartbeats {
				stop(errLeaseLost)
				<-done
				log.Error("stopped handler: lease lost")
				return
			}
		case o := <-done:
			e.finish(ctx, log, t, o.result, o.err)
			return
		}
	}
}

// finish reports how the handler ended. It runs even when ctx is done: a shutdown releases the
// task rather than failing it.
func (e *Executor) finish(ctx context.Context, log *slog.Logger, t task.Task, result []byte, err error) {
	report, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if err != nil && ctx.Err() != nil {
		if rerr := e.status.Release(report, t.Lambda, t.ID, t.Lease); rerr != nil {
			log.Warn("could not release task at shutdown", "err", rerr)
		} else {
			log.Info("released task at shutdown")
		}
		return
	}
	r := status.Result{Outcome: status.Success, Result: result}
	if err != nil {
		r = status.Result{Outcome: status.Fatal, Error: err.Error()}
		if worker.Retriable(err) {
			r.Outcome = status.Retriable
		}
	}
	stored, serr := e.status.SetResult(report, t.Lambda, t.ID, t.Lease, r)
	if serr != nil {
		// The consumer re-runs the task after its heartbeat timeout: at least once.
		log.Warn("could not record result", "outcome", r.Outcome, "err", serr)
		return
	}
	log.Info("task ran", "outcome", r.Outcome, "status", stored.Status, "err", r.Error)
}
