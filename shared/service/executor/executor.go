// Package executor runs one claimed task: it starts the handler, heartbeats while it runs, and
// reports the outcome. It keeps the no-concurrent-execution guarantee on its side, by the clock
// rather than by counting failures: the store lets another worker claim the task HeartbeatTimeout
// after the last heartbeat it recorded, so the executor stops the handler at the start of its
// last successful heartbeat + HeartbeatTimeout − LeaseMargin, however slow or broken the status
// calls in between. Every status call has a deadline within that time. A handler that does not
// return within half the margin after it was stopped cannot be stopped in-process (Go cannot kill
// a goroutine): the executor then abandons it, which by default ends the process. The timing
// argument is in docs/guarantees.md.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// Status is the heartbeat and status controller as an executor sees it: in-process locally
// (*status.Controller), a function invocation on AWS.
type Status interface {
	// Claim claims an enqueued task for one delivery of its message (its receipt): see
	// status.Controller.Claim.
	Claim(ctx context.Context, lambda, id, delivery string) (task.Task, error)
	Heartbeat(ctx context.Context, lambda, id, lease string) error
	SetResult(ctx context.Context, lambda, id, lease string, r status.Result) (task.Task, error)
	Release(ctx context.Context, lambda, id, lease string) error
}

var _ Status = (*status.Controller)(nil)

// reportTimeout bounds the final result or release call, which runs even during shutdown. It
// needs no tighter bound: the handler has returned, and a result that comes too late is refused.
const reportTimeout = 10 * time.Second

// ExitAbandoned is the exit code of a process that ended because a handler it could not stop
// still ran when its lease ran out.
const ExitAbandoned = 70

// Config configures an Executor.
type Config struct {
	// Task holds the timings: HeartbeatInterval, HeartbeatTimeout, ClaimTimeout and LeaseMargin.
	// Zero fields take their defaults; they must be the status controller's.
	Task   task.Config
	Logger *slog.Logger // slog.Default() if nil
	// Abandon is called when a stopped handler has not returned within half the lease margin:
	// it must make sure the handler runs no more. The default logs and ends the process with
	// ExitAbandoned (a Lambda invocation then fails and an ECS task is replaced); the other tasks
	// the process held come back through their timeouts.
	Abandon func(t task.Task)
}

// Executor runs claimed tasks.
type Executor struct {
	status  Status
	cfg     task.Config
	log     *slog.Logger
	abandon func(task.Task)
}

// New returns an Executor.
func New(s Status, c Config) *Executor {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	e := &Executor{status: s, cfg: c.Task.WithDefaults(), log: c.Logger, abandon: c.Abandon}
	if e.abandon == nil {
		e.abandon = func(t task.Task) {
			e.log.Error("a stopped handler ignored its context past the lease margin; ending the process so it cannot overlap the task's next run",
				"lambda", t.Lambda, "task_id", t.ID, "attempt", t.Attempts)
			os.Exit(ExitAbandoned)
		}
	}
	return e
}

// Claim claims the task of a message delivery, within the claim timeout less the lease margin:
// a claim answered later than that may already have timed out, and its heartbeat is refused.
func (e *Executor) Claim(ctx context.Context, lambda, id, delivery string) (task.Task, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ClaimTimeout-e.cfg.LeaseMargin)
	defer cancel()
	return e.status.Claim(ctx, lambda, id, delivery)
}

// errLeaseLost is the cause given to a handler's context when the executor stops it.
var errLeaseLost = errors.New("lease lost: heartbeats failed, another worker may run the task")

// outcome is how a handler returned.
type outcome struct {
	result []byte
	err    error
}

// beat is the outcome of one heartbeat call, and when it was sent.
type beat struct {
	sent time.Time
	err  error
}

// Run runs the claimed task t with h, bounded by l.Timeout. Cancelling ctx means the executor is
// shutting down: the handler is stopped and the task released, untried, for another worker.
func (e *Executor) Run(ctx context.Context, l task.Lambda, h worker.Handler, t task.Task) {
	log := e.log.With("lambda", t.Lambda, "task_id", t.ID, "attempt", t.Attempts)
	// The first heartbeat starts the task. Its answer counts only if it comes in time to run the
	// handler inside the lease it renews, and while the claim it moves from is still alive.
	sent := time.Now()
	stopAt := e.stopAt(sent)
	sctx, cancel := context.WithDeadline(ctx, sent.Add(min(e.cfg.ClaimTimeout, e.cfg.HeartbeatTimeout)-e.cfg.LeaseMargin))
	err := e.status.Heartbeat(sctx, t.Lambda, t.ID, t.Lease)
	cancel()
	if err == nil && !time.Now().Before(stopAt) {
		err = errors.New("the start was answered after the lease it renewed had run out")
	}
	if err != nil {
		log.Warn("could not start task", "err", err)
		if !errors.Is(err, task.ErrStaleLease) {
			// Hand it back now rather than at its timeout; refused if it moved on meanwhile.
			e.release(ctx, log, t)
		}
		return
	}

	hctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	hctx, cancelTimeout := context.WithTimeoutCause(hctx, l.Timeout, fmt.Errorf("handler timed out after %s", l.Timeout))
	defer cancelTimeout()
	done := make(chan outcome, 1)
	go func() {
		r, err := worker.Run(hctx, h, worker.Task{
			ID: t.ID, Lambda: t.Lambda, Collection: t.Collection, Priority: t.Priority,
			Attempt: t.Attempts, Payload: t.Payload, Inputs: t.Inputs,
		})
		done <- outcome{r, err}
	}()

	ticker := time.NewTicker(e.cfg.HeartbeatInterval)
	defer ticker.Stop()
	deadline := time.NewTimer(time.Until(stopAt))
	defer deadline.Stop()
	// One heartbeat at a time, each bounded by the lease's end: a slow call never delays the
	// stop, and a tick that comes while one is out is skipped.
	beats := make(chan beat, 1)
	inFlight := false
	missed := 0
	for {
		select {
		case <-ticker.C:
			if inFlight {
				continue
			}
			ticker.Reset(e.cfg.HeartbeatInterval)
			inFlight = true
			go func(sent, until time.Time) {
				bctx, cancel := context.WithDeadline(ctx, until)
				defer cancel()
				err := e.status.Heartbeat(bctx, t.Lambda, t.ID, t.Lease)
				if err != nil {
					// Logged here, so an answer that comes after the stop is still seen.
					log.Warn("heartbeat failed", "err", err)
				}
				beats <- beat{sent, err}
			}(time.Now(), stopAt)
		case b := <-beats:
			inFlight = false
			if time.Since(b.sent) >= e.cfg.HeartbeatInterval {
				// It was slow: the tick it held back is due, so the next one goes now.
				ticker.Reset(time.Nanosecond)
			}
			switch {
			case b.err == nil:
				missed = 0
				stopAt = e.stopAt(b.sent)
				deadline.Reset(time.Until(stopAt))
				continue
			case errors.Is(b.err, task.ErrStaleLease):
				missed = task.MaxMissedHeartbeats
			default:
				missed++
			}
			if missed >= task.MaxMissedHeartbeats {
				e.stop(log, t, stop, done, "heartbeats failed")
				return
			}
		case <-deadline.C:
			e.stop(log, t, stop, done, "no heartbeat succeeded in time")
			return
		case o := <-done:
			e.finish(ctx, log, t, o.result, o.err)
			return
		}
	}
}

// stopAt is when a handler must be stopped, given the send time of its last good heartbeat.
func (e *Executor) stopAt(sent time.Time) time.Time {
	return sent.Add(e.cfg.HeartbeatTimeout - e.cfg.LeaseMargin)
}

// stop cancels the handler and waits for it half the lease margin; the other half covers the
// clock skew between the status controller and the consumer. A handler still running then is
// abandoned: it ignores its context, and the task may be claimed again soon.
func (e *Executor) stop(log *slog.Logger, t task.Task, cancel context.CancelCauseFunc, done <-chan outcome, why string) {
	cancel(errLeaseLost)
	grace := time.NewTimer(e.cfg.LeaseMargin / 2)
	defer grace.Stop()
	select {
	case <-done:
		log.Error("stopped handler: lease lost", "reason", why)
	case <-grace.C:
		e.abandon(t)
	}
}

// finish reports how the handler ended. It runs even when ctx is done: a shutdown releases the
// task rather than failing it.
func (e *Executor) finish(ctx context.Context, log *slog.Logger, t task.Task, result []byte, err error) {
	report, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if err != nil && ctx.Err() != nil {
		e.release(ctx, log, t)
		return
	}
	r := status.Result{Outcome: status.Success, Result: result}
	if err != nil {
		// The task keeps at most MaxErrorBytes of it: a longer error would only weigh on the call.
		r = status.Result{Outcome: status.Fatal, Error: task.TruncateError(err.Error())}
		if worker.Retriable(err) {
			r.Outcome = status.Retriable
		}
	}
	if r.Outcome == status.Success && len(result) > e.cfg.PayloadLimit {
		// The controller would refuse it as well, but a Go handler may return any size, and a
		// result over Lambda's 6 MB invoke limit never reaches the status function on AWS: the
		// call would fail, and the task run again until dead. Ending it here says why, at once.
		r = status.Result{Outcome: status.Fatal, Error: fmt.Sprintf("result is %d bytes; the limit is %d", len(result), e.cfg.PayloadLimit)}
	}
	stored, serr := e.status.SetResult(report, t.Lambda, t.ID, t.Lease, r)
	if serr != nil {
		// The consumer re-runs the task after its heartbeat timeout: at least once.
		log.Warn("could not record result", "outcome", r.Outcome, "err", serr)
		return
	}
	log.Info("task ran", "outcome", r.Outcome, "status", stored.Status, "err", r.Error)
}

// release hands t back untried, as at shutdown or when it could not start: the attempt does not
// count, and the task is due again at once.
func (e *Executor) release(ctx context.Context, log *slog.Logger, t task.Task) {
	report, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if err := e.status.Release(report, t.Lambda, t.ID, t.Lease); err != nil {
		log.Warn("could not release task", "err", err)
	} else {
		log.Info("released task untried")
	}
}
