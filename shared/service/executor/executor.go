// Package executor runs one claimed task: it starts the handler, heartbeats while it runs, and
// reports the outcome. It keeps the no-concurrent-execution guarantee on its side, by the clock
// rather than by counting failures: the store lets another worker claim the task HeartbeatTimeout
// after the claim or the last heartbeat it recorded, so the executor stops the handler at the
// send time of the claim or of its last successful heartbeat + HeartbeatTimeout − LeaseMargin,
// however slow or broken the status calls in between. Every status call has a deadline within
// that time. A handler that does not return within half the margin after it was stopped cannot
// be stopped in-process (Go cannot kill a goroutine): the executor then abandons it, which by
// default ends the process. The timing argument is in docs/guarantees.md.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// Status is the heartbeat and status controller as an executor sees it: in-process locally
// (*status.Controller), a function invocation on AWS.
type Status interface {
	// Claim claims an enqueued task for one delivery of its message (its receipt), by the call
	// that token names: see status.Controller.Claim.
	Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error)
	Heartbeat(ctx context.Context, lambda, id, lease string) error
	SetResult(ctx context.Context, lambda, id, lease string, r status.Result) (task.Task, error)
	Release(ctx context.Context, lambda, id, lease string) error
	// Unclaim hands back the claim made for a delivery by the call of token, whose answer never
	// came: see status.Controller.Unclaim.
	Unclaim(ctx context.Context, lambda, id, delivery, token string) error
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
	// Task holds the timings: HeartbeatInterval, HeartbeatTimeout and LeaseMargin.
	// Zero fields take their defaults; they must be the status controller's.
	Task   task.Config
	Logger *slog.Logger // slog.Default() if nil
	// Abandon is called when a stopped handler has not returned within half the lease margin:
	// it must make sure the handler runs no more. The default logs and ends the process with
	// ExitAbandoned (a Lambda invocation then fails and an ECS task is replaced); the other tasks
	// the process held come back through their timeouts.
	Abandon func(t task.Task)
	// CancelGrace is how long a handler whose task was cancelled while it ran has to return: a
	// program gets SIGTERM, then SIGKILL after it (worker.Cancellation). It is cut to what is
	// left of the lease. Zero means DefaultCancelGrace.
	CancelGrace time.Duration
	// Metrics, if set, observes every handler run: how long it took and how it ended.
	Metrics HandlerMetrics
	// Worker names this executor in the attempts it runs (task.Attempt.Worker): its claims
	// carry it (status.WithWorker). Empty means DefaultWorker().
	Worker string
	// LogLocation, if set, names where this executor's own logs are (an ECS executor's log group
	// and stream): its claims carry it (status.WithLogLocation), so that every attempt it runs
	// says where to look. A worker function names its own per claim, with its invocation.
	LogLocation *task.LogLocation
	// LogHandlerOutput also logs, with Logger, each line a handler writes to its attempt's log
	// (worker.LogOf: a program's standard error) as it comes, with the task's lambda, id and
	// attempt (worker.Task.Attempt) as its other lines about the run have them: for an executor
	// whose store keeps no attempt logs (DynamoDB), so that a handler's output reaches its own
	// log (CloudWatch Logs on ECS). atf dev keeps the output with the attempt instead.
	LogHandlerOutput bool
	// Results, if set, takes the results of runs to record later, with others (status.Completer
	// in the process of the store): the run ends once its result is handed over, and its slot
	// takes the next task without waiting for the write. Nil: each result is recorded by the
	// Status's SetResult before the run ends.
	Results Results
	// QuietSuccess logs a run that succeeded at debug rather than info. A worker function sets it:
	// CloudWatch Logs bills its log by the byte, and it logs a summary per batch instead
	// (sqsworker). Runs that fail are logged as loudly either way.
	QuietSuccess bool
}

// Results takes the result of a run under a lease, to be recorded later (status.Completer).
type Results interface {
	Complete(lambda, id, lease string, r status.Result)
}

// HandlerMetrics observes handler runs (metrics.Recorder is one). outcome is a status.Outcome, or
// "stopped" for a run stopped without a result (lease lost, shutdown).
type HandlerMetrics interface {
	HandlerRan(lambda, outcome string, took time.Duration)
}

// DefaultCancelGrace is the default Config.CancelGrace. With the default timings a heartbeat
// that learns of a cancel leaves at least HeartbeatTimeout − LeaseMargin − HeartbeatInterval
// (20 s) of the lease, so the grace is never cut.
const DefaultCancelGrace = 10 * time.Second

// Executor runs claimed tasks.
type Executor struct {
	status      Status
	results     Results
	cfg         task.Config
	log         *slog.Logger
	abandon     func(task.Task)
	cancelGrace time.Duration
	metrics     HandlerMetrics
	worker      string
	logs        *task.LogLocation
	logOutput   bool
	success     slog.Level // of the record of a run that succeeded
}

// New returns an Executor.
func New(s Status, c Config) *Executor {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CancelGrace <= 0 {
		c.CancelGrace = DefaultCancelGrace
	}
	if c.Worker == "" {
		c.Worker = DefaultWorker()
	}
	e := &Executor{status: s, results: c.Results, cfg: c.Task.WithDefaults(), log: c.Logger, abandon: c.Abandon, cancelGrace: c.CancelGrace, metrics: c.Metrics, worker: c.Worker,
		logs: c.LogLocation, logOutput: c.LogHandlerOutput}
	if c.QuietSuccess {
		e.success = slog.LevelDebug
	}
	if e.abandon == nil {
		e.abandon = func(t task.Task) {
			e.log.Error("a stopped handler ignored its context past the lease margin; ending the process so it cannot overlap the task's next run",
				"lambda", t.Lambda, "task_id", t.ID, "attempt", t.Attempts)
			os.Exit(ExitAbandoned)
		}
	}
	return e
}

// DefaultWorker names an executor by its process: host name and process id.
func DefaultWorker() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// Claimed is a claimed task, and when its claim was sent: the lease it holds runs from then.
type Claimed struct {
	task.Task
	// Sent is when the claim call was sent, before the controller read its clock to start the
	// lease (task.Claim): its end is measured from here, as a heartbeat's from its send.
	Sent time.Time
}

// Claim claims the task of a message delivery. The claim starts the task (task.Claim), so the
// lease runs from the call's send: a claim answered later than HeartbeatTimeout − LeaseMargin
// after it would be stopped before it could start, and the call gives up then.
//
// The call carries a token of its own (status.Controller.Claim), so that another caller with the
// same delivery (an event source mapping's batch processed twice) gets no share of its claim.
//
// A claim that fails without being refused (task.Refused: a timeout, a lost answer, a store or
// status function fault) may have been written all the same, and nobody would run it: its
// attempt would be spent at its heartbeat timeout. So Claim hands it back (Unclaim) before it
// returns the error, best effort: the attempt does not count, and the task is due again at once.
// When ctx has a deadline (a Lambda invocation's), the claim keeps part of the time left for the
// unclaim (unclaimTime), and the unclaim ends by the deadline.
func (e *Executor) Claim(ctx context.Context, lambda, id, delivery string) (Claimed, error) {
	if err := ctx.Err(); err != nil {
		return Claimed{}, err // nothing sent: nothing to hand back
	}
	token := task.NewLease()
	sent := time.Now()
	end := e.stopAt(sent)
	if d, ok := ctx.Deadline(); ok {
		end = minTime(end, d.Add(-unclaimTime(d.Sub(sent))))
	}
	cctx, cancel := context.WithDeadline(status.WithWorker(ctx, e.worker), end)
	defer cancel()
	if e.logs != nil {
		cctx = status.WithLogLocation(cctx, e.logs)
	}
	t, err := e.status.Claim(cctx, lambda, id, delivery, token)
	if err != nil && !task.Refused(err) && !status.Unwritten(err) && delivery != "" {
		e.unclaim(ctx, lambda, id, delivery, token, err)
	}
	return Claimed{Task: t, Sent: sent}, err
}

// unclaimTime is how much of the time left before a claim's deadline it keeps for its unclaim:
// half, at most reportTimeout.
func unclaimTime(left time.Duration) time.Duration { return min(reportTimeout, left/2) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// unclaim hands back the claim of delivery made by the call of token, which failed with
// claimErr, in case it was written. It runs even if ctx was cancelled, for reportTimeout at most
// and never past ctx's deadline: past a Lambda invocation's deadline the runtime ends it, and its
// batch's answer with it.
func (e *Executor) unclaim(ctx context.Context, lambda, id, delivery, token string, claimErr error) {
	log := e.log.With("lambda", lambda, "task_id", id, "claim_err", claimErr)
	end := time.Now().Add(reportTimeout)
	if d, ok := ctx.Deadline(); ok {
		end = minTime(end, d)
	}
	report, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	switch err := e.status.Unclaim(report, lambda, id, delivery, token); {
	case err == nil:
		log.Info("claim failed after it was written; handed back untried")
	case errors.Is(err, task.ErrInvalid):
		// A status function older than unclaim.
		log.Warn("claim failed and the status function cannot hand it back; if it was written, its heartbeat timeout counts its attempt", "err", err)
	case errors.Is(err, task.ErrConflict):
		log.Warn("claim failed after it was written, and its attempt's claims were handed back too often already; its heartbeat timeout counts the attempt", "err", err)
	case task.Refused(err):
		log.Debug("claim failed and was not written; nothing to hand back", "err", err)
	default:
		log.Warn("claim failed and could not be handed back; if it was written, its heartbeat timeout counts its attempt", "err", err)
	}
}

// errLeaseLost is the cause given to a handler's context when the executor stops it.
var errLeaseLost = errors.New("lease lost: heartbeats failed, another worker may run the task")

// outcome is how a handler returned, and what it wrote to its log.
type outcome struct {
	result []byte
	err    error
	log    string
}

// beat is the outcome of one heartbeat call, and when it was sent.
type beat struct {
	sent time.Time
	err  error
}

// Run runs the claimed task c with h, bounded by l.Timeout. Cancelling ctx means the executor is
// shutting down: the handler is stopped (or never started) and the task released, untried, for
// another worker.
//
// A heartbeat answered task.ErrCancelled (the task was cancelled while it ran) ends the
// heartbeats, which could not renew the lease any more, and stops the handler: its context is
// cancelled with a worker.Cancellation, whose grace (CancelGrace, cut to the lease) a program
// gets between SIGTERM and SIGKILL. Once the handler returns, the executor reports the outcome
// cancelled. A handler that ignores it is stopped when the lease ends, as any other.
//
// The claim started the task: the handler starts at once, and the first heartbeat comes a
// heartbeat interval after the claim was sent. A claim that comes too late to run inside its
// lease (Claimed.Sent + HeartbeatTimeout − LeaseMargin) is released, not run.
//
// Run reports whether the run's end is in the store (or the task moved on without it): then
// the queue message that timed the lease (task.Task.Message) may be deleted. Otherwise the
// message must come back, to time the attempt out.
func (e *Executor) Run(ctx context.Context, l task.Lambda, h worker.Handler, c Claimed) (settled bool) {
	t := c.Task
	log := e.log.With("lambda", t.Lambda, "task_id", t.ID, "attempt", t.Attempts)
	stopAt := e.stopAt(c.Sent)
	switch {
	case ctx.Err() != nil:
		return e.release(ctx, log, t) // shut down before the handler started
	case !time.Now().Before(stopAt):
		log.Warn("could not start task: its lease ran out before it could run", "claim_sent", c.Sent)
		// Hand it back now rather than at its timeout; refused if it moved on meanwhile.
		return e.release(ctx, log, t)
	}

	hctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	hctx, cancelTimeout := context.WithTimeoutCause(hctx, l.Timeout, fmt.Errorf("handler timed out after %s", l.Timeout))
	defer cancelTimeout()
	done := make(chan outcome, 1)
	// returned is closed the moment the handler returns, before anything else runs on its
	// goroutine: stop judges the handler by it, not by done, which waits for the metrics.
	returned := make(chan struct{})
	go func() {
		started := time.Now()
		runLog := worker.NewLog()
		var lines *handlerLines
		if e.logOutput {
			lines = &handlerLines{log: log}
			runLog = worker.NewLogTo(lines)
		}
		r, err := worker.Run(worker.WithLog(hctx, runLog), h, worker.Task{
			ID: t.ID, Lambda: t.Lambda, Collection: t.Collection, Priority: t.Priority,
			Attempt: t.Attempts, Payload: t.Payload, Inputs: t.Inputs,
		})
		close(returned)
		if lines != nil {
			lines.close()
		}
		e.observe(hctx, t.Lambda, err, time.Since(started))
		done <- outcome{r, err, runLog.String()}
	}()

	// The first tick comes an interval after the claim, as if the claim had been a heartbeat;
	// each tick then sets the next.
	ticker := time.NewTicker(max(time.Until(c.Sent.Add(e.cfg.HeartbeatInterval)), time.Nanosecond))
	defer ticker.Stop()
	deadline := time.NewTimer(time.Until(stopAt))
	defer deadline.Stop()
	// One heartbeat at a time, each bounded by the lease's end: a slow call never delays the
	// stop, and a tick that comes while one is out is skipped.
	beats := make(chan beat, 1)
	inFlight := false
	missed := 0
	cancelled := false // a heartbeat answered task.ErrCancelled: the handler is being stopped
	for {
		select {
		case <-ticker.C:
			if inFlight || cancelled {
				continue
			}
			ticker.Reset(e.cfg.HeartbeatInterval)
			inFlight = true
			go func(sent, until time.Time) {
				bctx, cancel := context.WithDeadline(ctx, until)
				defer cancel()
				err := e.status.Heartbeat(bctx, t.Lambda, t.ID, t.Lease)
				if err != nil && !errors.Is(err, task.ErrCancelled) {
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
			case errors.Is(b.err, task.ErrCancelled):
				cancelled = true
				ticker.Stop()
				grace := max(min(e.cancelGrace, time.Until(stopAt)), 0)
				log.Info("task cancelled while running; stopping its handler", "grace", grace)
				stop(worker.Cancellation{Grace: grace})
				continue
			case errors.Is(b.err, task.ErrStaleLease):
				missed = task.MaxMissedHeartbeats
			default:
				missed++
			}
			if missed >= task.MaxMissedHeartbeats {
				e.stop(log, t, stop, returned, "heartbeats failed")
				return false
			}
		case <-deadline.C:
			if !cancelled {
				e.stop(log, t, stop, returned, "no heartbeat succeeded in time")
			} else if e.stop(log, t, stop, returned, "the handler ignored its task's cancel until its lease ended") {
				// Still within the lease, by the margin: the report ends the task now rather than
				// at its timeout, which would end it cancelled too.
				return e.reportCancelled(ctx, log, t, "")
			}
			return false
		case o := <-done:
			if cancelled {
				return e.reportCancelled(ctx, log, t, o.log)
			}
			return e.finish(ctx, log, t, o)
		}
	}
}

// observe tells the metrics how a handler run ended: as its result is reported (success,
// retriable, fatal, snoozed), cancelled if it was stopped for its task's cancel, stopped if for
// anything else (its lease lost, a shutdown).
func (e *Executor) observe(hctx context.Context, lambda string, err error, took time.Duration) {
	if e.metrics == nil {
		return
	}
	outcome := string(status.Success)
	var cancel worker.Cancellation
	switch cause := context.Cause(hctx); {
	case err == nil:
	case errors.As(cause, &cancel):
		outcome = string(status.Cancelled)
	case errors.Is(cause, errLeaseLost) || (hctx.Err() != nil && !errors.Is(hctx.Err(), context.DeadlineExceeded)):
		outcome = "stopped"
	default:
		outcome = string(resultOf(err).Outcome)
	}
	e.metrics.HandlerRan(lambda, outcome, took)
}

// stopAt is when a handler must be stopped, given the send time of its claim or of its last good
// heartbeat.
func (e *Executor) stopAt(sent time.Time) time.Time {
	return sent.Add(e.cfg.HeartbeatTimeout - e.cfg.LeaseMargin)
}

// stop cancels the handler and waits for it half the lease margin; the other half covers the
// clock skew between the status controller and the consumer. A handler still running then is
// abandoned: it ignores its context, and the task may be claimed again soon. It reports whether
// the handler returned.
//
// The handler is judged by returned, closed as it returns: a select with the timer and returned
// both ready picks either, and a starved machine can fire the timer late, so the timer's case
// looks at returned once more before it abandons a handler that has in fact returned.
func (e *Executor) stop(log *slog.Logger, t task.Task, cancel context.CancelCauseFunc, returned <-chan struct{}, why string) bool {
	cancel(errLeaseLost)
	grace := time.NewTimer(e.cfg.LeaseMargin / 2)
	defer grace.Stop()
	select {
	case <-returned:
	case <-grace.C:
		select {
		case <-returned:
		default:
			e.abandon(t)
			return false
		}
	}
	log.Error("stopped handler: lease lost", "reason", why)
	return true
}

// reportCancelled reports that the handler of a task cancelled while it ran has stopped: the task
// ends cancelled (task.CancelRunning). If the report fails, the task ends cancelled at its
// timeout all the same. runLog is what the handler wrote to its log, if it returned. It reports
// whether the run's end is in the store (settled).
func (e *Executor) reportCancelled(ctx context.Context, log *slog.Logger, t task.Task, runLog string) bool {
	report, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	stored, err := e.status.SetResult(report, t.Lambda, t.ID, t.Lease, status.Result{Outcome: status.Cancelled, Log: runLog})
	if err != nil {
		log.Warn("could not report the cancelled run; the task ends cancelled at its timeout", "err", err)
		return settled(err)
	}
	log.Info("task ran", "outcome", status.Cancelled, "status", stored.Status)
	return true
}

// settled reports whether a report answered err leaves the run's end in the store, or the task
// moved on without it (its lease lost, or the task gone): no message need time the attempt out.
// A conflict is not: it may be a task that kept changing under the write, still running under
// this lease. Keeping a message too long only brings it back, to a claim that drops it.
func settled(err error) bool {
	return err == nil || errors.Is(err, task.ErrStaleLease) || errors.Is(err, task.ErrNotFound)
}

// finish reports how the handler ended, with its log. It runs even when ctx is done: a shutdown
// releases the task rather than failing it. It reports whether the run's end is in the store
// (settled); a result handed over to Results counts as in it.
func (e *Executor) finish(ctx context.Context, log *slog.Logger, t task.Task, o outcome) bool {
	report, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	result, err := o.result, o.err
	if err != nil && ctx.Err() != nil {
		return e.release(ctx, log, t)
	}
	r := status.Result{Outcome: status.Success, Result: result}
	if err != nil {
		r = resultOf(err)
	}
	if r.Outcome == status.Success && len(result) > e.cfg.PayloadLimit {
		// The controller would refuse it as well, but a Go handler may return any size, and a
		// result over Lambda's 6 MB invoke limit never reaches the status function on AWS: the
		// call would fail, and the task run again until dead. Ending it here says why, at once.
		r = status.Result{Outcome: status.Fatal, Error: fmt.Sprintf("result is %d bytes; the limit is %d", len(result), e.cfg.PayloadLimit)}
	}
	r.Log = o.log
	if e.results != nil {
		e.results.Complete(t.Lambda, t.ID, t.Lease, r)
		log.Info("task ran; its result is handed over to be recorded", "outcome", r.Outcome, "err", r.Error)
		return true
	}
	stored, serr := e.status.SetResult(report, t.Lambda, t.ID, t.Lease, r)
	if serr != nil {
		// The consumer re-runs the task after its heartbeat timeout: at least once.
		log.Warn("could not record result", "outcome", r.Outcome, "err", serr)
		return settled(serr)
	}
	level := slog.LevelInfo
	if r.Outcome == status.Success && stored.Status == task.StatusSuccess {
		level = e.success
	}
	log.Log(ctx, level, "task ran", "outcome", r.Outcome, "status", stored.Status, "err", r.Error)
	return true
}

// resultOf is the result that reports a handler's error: fatal, retriable, or a run again later
// that the handler asked for (worker.Snooze, worker.RetryAfter).
func resultOf(err error) status.Result {
	// The task keeps at most MaxErrorBytes of it: a longer error would only weigh on the call.
	r := status.Result{Outcome: status.Fatal, Error: task.TruncateError(err.Error())}
	if !worker.Retriable(err) {
		return r
	}
	r.Outcome = status.Retriable
	later, ok := worker.LaterOf(err)
	if !ok {
		return r
	}
	if cerr := task.CheckLater(later.Delay); cerr != nil {
		// The controller would refuse it, and the run count at its timeout: a retriable failure
		// that says why instead.
		r.Error = task.TruncateError(fmt.Sprintf("%s (the handler asked to run again later, but %v)", err, cerr))
		return r
	}
	d := later.Delay
	r.Delay = &d
	if !later.Counted {
		r.Outcome, r.Error = status.Snoozed, ""
	}
	return r
}

// release hands t back untried, as at shutdown or when it came too late to run: the attempt does
// not count, and the task is due again at once. It reports whether the release is in the store
// (settled).
func (e *Executor) release(ctx context.Context, log *slog.Logger, t task.Task) bool {
	report, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	err := e.status.Release(report, t.Lambda, t.ID, t.Lease)
	if err != nil {
		log.Warn("could not release task", "err", err)
	} else {
		log.Info("released task untried")
	}
	return settled(err)
}
