// Package status is the heartbeat and status controller: the only writer of a task while a
// worker owns it. It hands out leases on claim and accepts heartbeats and results only with the
// current lease, so a worker that lost its task can never overwrite the work of the next one.
//
// Locally it runs in-process; on AWS it is the status function that workers invoke.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Outcome of one run of a handler.
type Outcome string

// The outcomes a worker can report.
const (
	Success   Outcome = "success"
	Retriable Outcome = "retriable"
	Fatal     Outcome = "fatal"
	// Cancelled reports a run stopped because its task was cancelled: the heartbeat answered
	// task.ErrCancelled and the handler was stopped (task.CancelRunning).
	Cancelled Outcome = "cancelled"
	// Snoozed reports a run whose handler asked to run again after Result.Delay, with no attempt
	// counted (task.Snooze).
	Snoozed Outcome = "snoozed"
)

// Result is what a worker reports when its handler returns.
type Result struct {
	Outcome Outcome         `json:"outcome"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   string          `json:"error,omitempty"`
	// Log is what the handler wrote to its log (worker.LogOf), kept with the attempt it ended
	// (task.Attempt.Log) by a store that keeps logs. Never sent to the status function: on AWS
	// the logs are in CloudWatch.
	Log string `json:"-"`
	// Delay is, for Snoozed (which needs it), how long until the task runs again; for Retriable,
	// if set, how long until its next attempt, instead of the backoff (task.RetryAfter). Within
	// task.CheckLater's bounds.
	Delay *time.Duration `json:"delay,omitempty"`
}

// Controller claims tasks for workers and records their progress.
type Controller struct {
	store   task.Store
	queue   task.Queue
	gates   *task.GateSnapshot
	cfg     task.Config
	lambdas task.Catalog
	now     func() time.Time
	jitter  func() float64
	log     *slog.Logger
	// early is how long a claim of a message sent first waits, in all, for its task's create
	// before it buries the message (Config.EarlyWait).
	early time.Duration
}

// Config configures a Controller. Zero fields take defaults: the task defaults, the wall clock,
// math/rand jitter and slog.Default.
type Config struct {
	Task   task.Config
	Now    func() time.Time
	Jitter func() float64
	Logger *slog.Logger
	// Queue, if set, is where a run that ends with a retry due within task.MaxSendAhead, or a
	// task handed back untried, is sent at once (see ahead.go). Without it the consumer enqueues
	// them.
	Queue task.Queue
	// Gates, if set, is the snapshot of the gates that claims read, shared with the schedule path
	// of the same process (frontend.Config.Gates), which renews it when it sets a gate. Nil: a
	// snapshot of the Controller's own, read at most once per GateAge.
	Gates *task.GateSnapshot
	// Lambdas, if set, gives each lambda's own backoff (task.Lambda.Backoff) to its retries, and
	// its limits (task.Lambda.Limits) to its claims' starts. Without it, or for a lambda it does
	// not list, retries take Task's backoff, and starts have no limits.
	Lambdas task.Catalog
	// EarlyWait is how long, in all, a claim of a message sent before its task was written waits
	// for the task before it buries the message; DefaultEarlyWait if zero, none if negative.
	EarlyWait time.Duration
}

// DefaultEarlyWait is how long a claim of a message sent first waits for its task's create:
// the message of a task due now may be received before the create lands (a batch's transaction
// takes tens of milliseconds), and burying it would fail the create, and with it its whole
// batch, to be sent and written again. The claim reads again after 25 ms, then twice as long
// each time, until this is spent.
const DefaultEarlyWait = 750 * time.Millisecond

// New returns a Controller over store.
func New(store task.Store, c Config) *Controller {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.EarlyWait == 0 {
		c.EarlyWait = DefaultEarlyWait
	}
	ctl := &Controller{store: store, queue: c.Queue, cfg: c.Task.WithDefaults(), lambdas: c.Lambdas, now: c.Now, jitter: c.Jitter, log: c.Logger, early: c.EarlyWait}
	ctl.gates = c.Gates
	if ctl.gates == nil {
		ctl.gates = &task.GateSnapshot{Store: store, Age: GateAge}
	}
	return ctl
}

// GatherCounts gathers the count moves of the store writes made under the context it returns,
// for flush to write summed (task.GatherCounts): the status function serves a batch of requests
// so, and flushes before it answers.
func (c *Controller) GatherCounts(ctx context.Context) (context.Context, func()) {
	return task.GatherCounts(ctx, c.store)
}

// GateAge is how long a claim trusts the gates it read: a gate closed now holds the claims of its
// tasks within it. Tasks may be sent to their queue up to task.MaxSendAhead before they run, so
// the claim, not only the consumer's sweep, must honour a pause or a drop.
const GateAge = time.Second

// Claim gives an enqueued task to the caller with a fresh lease. It fails with task.ErrConflict
// if the task is not enqueued (a duplicate message, or a task already claimed or finished), and
// task.ErrNotFound if it does not exist: in both cases the caller drops its message. On an error
// the task returned is empty: a caller never sees another holder's lease.
//
// The claim starts the task (task.Claim): it is processing at once, under the new lease, until a
// heartbeat timeout from now.
//
// delivery names the message delivery the claim is for (its receipt), and token the claim call
// (a random value its caller picks once and sends with every retry of the call): the lease is
// theirs (task.DeliveryLease). A claim sent again by the same call while the task still runs
// under its lease (a retried call whose first answer was lost) is answered with that claim
// again, the same lease, and counts no second attempt. Its lease is renewed from now, as by a
// heartbeat: the caller measures the lease from when it sent the call it got an answer to, which
// may be later than the first. A claim for the same delivery with another token (a batch that
// its event source mapping delivered twice) conflicts, as a duplicate message does. An empty
// token is a caller older than tokens: every such claim of the delivery shares its lease. An
// empty delivery always makes a new claim.
//
// A claim that finds no task reads again for EarlyWait (at most half its time left) before it
// answers task.ErrNotFound: its message may have been sent before its task's create landed. For
// a message sent first (its nonce, WithNonce), it then buries the nonce (task.Store.Bury): the
// create, if it comes later, then fails, and its request creates the task for the consumer. If
// the task landed meanwhile, the claim claims it.
//
// A claim of a task that a gate holds (paused or dropping, its lambda or its collection, as read
// within GateAge) hands the task back to the store, new and due at once (task.Hold), so that the
// consumer's sweep applies the gate, and fails with task.ErrConflict.
//
// The claim of a first attempt logs delivery_ms, how long after its run time the task was
// claimed (the delivery latency), at debug: the metrics (package metrics) measure the same from
// the claim's write, for the Prometheus histogram of atf dev and the EMF metric and alarm on AWS.
func (c *Controller) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	now := c.now().UTC()
	gates, err := c.gates.At(ctx, now)
	if err != nil {
		return task.Task{}, unwritten(err)
	}
	cl := c.claim(ctx, gates, lambda, id, delivery, token, now)
	if cl.limits, err = c.limitsOf(ctx, lambda); err != nil {
		return task.Task{}, unwritten(err)
	}
	t, err := task.Apply(ctx, c.store, lambda, id, cl.transition)
	if errors.Is(err, task.ErrNotFound) {
		cl, t, err = c.claimEarly(ctx, cl, NonceOf(ctx))
	}
	return c.claimed(ctx, cl, t, err)
}

// claimEarly claims a task whose message found no task, as one sent before its task was written
// does: it reads again, for EarlyWait at most, and half the time ctx leaves, since the create is
// most likely just landing. Then it buries the message's nonce, so that the create cannot land
// after, unless it just did: then it claims the task. A message without a nonce (a worker or a
// schedule path that predates them) buries nothing: its task, if it lands, has its resend
// trigger. Each read claims with a claim made then, with the gates as they are then (GateAge),
// which it returns.
func (c *Controller) claimEarly(ctx context.Context, cl *claimOf, nonce string) (*claimOf, task.Task, error) {
	early := c.early
	if d, ok := ctx.Deadline(); ok {
		early = min(early, time.Until(d)/2)
	}
	for wait, waited := 25*time.Millisecond, time.Duration(0); waited < early; wait *= 2 {
		wait = min(wait, early-waited)
		if err := sleep(ctx, wait); err != nil {
			return cl, task.Task{}, err
		}
		waited += wait
		var err error
		if cl, err = c.again(ctx, cl); err != nil {
			return cl, task.Task{}, err
		}
		if t, err := task.Apply(ctx, c.store, cl.lambda, cl.id, cl.transition); !errors.Is(err, task.ErrNotFound) {
			return cl, t, err
		}
	}
	if nonce == "" {
		return cl, task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", cl.id, cl.lambda)
	}
	err := c.store.Bury(ctx, cl.lambda, cl.id, nonce, c.now().UTC().Add(task.TombstoneLife))
	if errors.Is(err, task.ErrExists) {
		if cl, err = c.again(ctx, cl); err != nil {
			return cl, task.Task{}, err
		}
		t, err := task.Apply(ctx, c.store, cl.lambda, cl.id, cl.transition)
		return cl, t, err
	}
	if err == nil {
		err = task.Errorf(task.ErrNotFound, "task %q of lambda %s not found; its message is dropped", cl.id, cl.lambda)
	}
	return cl, task.Task{}, err
}

// again is the claim cl made anew at the time it is now, with the gates read within GateAge of it.
func (c *Controller) again(ctx context.Context, cl *claimOf) (*claimOf, error) {
	now := c.now().UTC()
	gates, err := c.gates.At(ctx, now)
	if err != nil {
		return cl, unwritten(err)
	}
	next := *cl
	next.gates, next.now = gates, now
	return &next, nil
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claimOf is one claim's transition, and what it found.
type claimOf struct {
	lambda, id, delivery string
	token                string
	worker               string            // who claims: the attempt's worker (WithWorker)
	logs                 *task.LogLocation // where its logs are (WithLogLocation)
	gates                []task.Gate
	now                  time.Time
	cfg                  task.Config
	again                bool   // a claim repeated for the same delivery
	gated                string // the mode of the gate that held the task
	cancelled            bool   // cancelled before the claim's answer got through
	// message is the id of the claim's queue message if its caller keeps it hidden until the
	// run's end is written (WithMessage): its visibility times the lease.
	message  string
	timedOut bool // the message that timed a running task's lease came back after the lease
	// limits are the lambda's (task.Limits), which the claim's start write honours.
	limits task.Limits
	// configOf and jitter time a running task's attempt out as the consumer's sweep would: with
	// its lambda's backoff (the sweep then enqueues the retry when it is due).
	configOf func() task.Config
	jitter   func() float64
}

func (c *Controller) claim(ctx context.Context, gates []task.Gate, lambda, id, delivery, token string, now time.Time) *claimOf {
	return &claimOf{lambda: lambda, id: id, delivery: delivery, token: token, worker: WorkerOf(ctx), logs: LogLocationOf(ctx), message: MessageOf(ctx), gates: gates, now: now, cfg: c.cfg,
		configOf: func() task.Config { return c.configOf(ctx, lambda) }, jitter: c.jitter}
}

// transition claims t, or holds it if its gate is closed (see Claim). It may be called again, on
// the task as it is then.
func (cl *claimOf) transition(t task.Task) (task.Task, error) {
	cl.again, cl.gated, cl.cancelled, cl.timedOut = false, "", false, false
	if mode := task.GateMode(cl.gates, cl.lambda, t.Collection); mode != task.GateOpen && t.Status == task.StatusEnqueued {
		cl.gated = mode
		return task.Hold(t, cl.now)
	}
	if cl.delivery == "" {
		return cl.named(task.Claim(t, task.NewLease(), cl.now, cl.cfg))
	}
	running := slices.Contains(task.Running, t.Status)
	if running && t.Lease == task.DeliveryLease(cl.lambda, cl.id, cl.delivery, cl.token, t.Attempts) {
		if t.CancelRequested {
			// Cancelled before the claim's answer got through: its handler never ran.
			cl.cancelled = true
			return task.CancelRunning(t, t.Lease, cl.now)
		}
		cl.again = true
		return task.Heartbeat(t, t.Lease, cl.now, cl.cfg)
	}
	if t.LeaseOnQueue() {
		switch cl.message {
		case t.Message:
			// The message that times the lease is back: its worker stopped hiding it. Before
			// the lease ends, ErrNotDue (the message must come back); after, the attempt timed
			// out, as the consumer's sweep would have it.
			cl.timedOut = true
			return task.Timeout(t, cl.now, cl.configOf(), cl.jitter())
		case "":
			// A worker that names no message (one older than message timers) deletes the
			// message of a conflict, and this may be the one that times the lease: not due, so
			// that it keeps it. A copy too many goes to the dead-letter queue, whose drain
			// gives the lease to the store's timer.
			return t, task.Errorf(task.ErrNotDue, "task %s runs under a lease its queue message times; a claim that names no message leaves it be", t.ID)
		}
		// Another message of the task: a duplicate, refused below; this one's times the lease.
	}
	return cl.named(task.Claim(t, task.DeliveryLease(cl.lambda, cl.id, cl.delivery, cl.token, t.Attempts+1), cl.now, cl.cfg))
}

// named names the claim's worker, and where its logs are, on the task it claimed.
func (cl *claimOf) named(t task.Task, err error) (task.Task, error) {
	if err == nil {
		t.Worker, t.LogLocation = cl.worker, cl.logs
		t.Limits = cl.limits
		t = t.TimedBy(cl.message)
	}
	return t, err
}

// claimed answers a claim whose transition was written (err nil) or failed with err.
func (c *Controller) claimed(ctx context.Context, cl *claimOf, t task.Task, err error) (task.Task, error) {
	switch {
	case errors.Is(err, task.ErrHeld):
		// A limit holds the start back (task.Limits): no attempt counts, and nothing was written
		// but a rate's booking. The worker fails the record, and the message comes back when the
		// limit may let it start.
		c.log.Debug("claim held by a limit", "lambda", cl.lambda, "task_id", cl.id, "err", err)
		return task.Task{}, err
	case errors.Is(err, task.ErrNotDue):
		// A message that came before its task's NotBefore, by the worker's clock ahead of ours,
		// or a stale one: no duplicate to drop, since it may be the task's only message (sent
		// first). The worker fails the record, and the message comes back, to claim the task
		// once it is due.
		return task.Task{}, err
	case cl.timedOut && err == nil:
		c.log.Warn("the message that timed a running task's lease came back after it: its worker was lost; the attempt timed out", "lambda", cl.lambda, "task_id", cl.id, "status", t.Status)
		return task.Task{}, task.Errorf(task.ErrConflict, "task %s: its worker was lost; the attempt timed out (now %s)", cl.id, t.Status)
	case cl.cancelled && err == nil:
		return task.Task{}, task.Errorf(task.ErrConflict, "task %s was cancelled before its claim was answered", cl.id)
	case cl.gated != "" && err == nil:
		c.log.Info("claim found the task's gate closed; handed back to the store", "lambda", cl.lambda, "task_id", cl.id, "gate", cl.gated)
		return task.Task{}, task.Errorf(task.ErrConflict, "task %s is held by its gate (%s); the consumer applies it", cl.id, cl.gated)
	case err != nil:
		return task.Task{}, err
	case cl.again:
		c.log.Info("claim repeated for the same delivery; answered with its lease, renewed", "lambda", cl.lambda, "task_id", cl.id, "attempt", t.Attempts)
	case t.Attempts == 1:
		c.log.Debug("task claimed", "lambda", cl.lambda, "task_id", cl.id, "delivery_ms", cl.now.Sub(t.RunAt).Milliseconds())
	}
	if t.AfterCount > 0 {
		return c.withInputs(ctx, t)
	}
	return t, nil
}

// withInputs gives a claimed task its upstreams' outcomes (task.Inputs). If they are over
// task.MaxInputBytes together, the task ends as fatal_failure saying so, and the claim fails with
// task.ErrConflict: no run could be given them.
func (c *Controller) withInputs(ctx context.Context, t task.Task) (task.Task, error) {
	refs := t.After
	if len(refs) != t.AfterCount {
		var err error
		if refs, err = c.store.Upstreams(ctx, t.Ref(), 0, t.AfterCount); err != nil {
			return task.Task{}, err
		}
	}
	ups, err := c.store.GetMany(ctx, refs)
	if err != nil {
		return task.Task{}, err
	}
	t.Inputs = make([]task.Input, len(ups))
	for i, u := range ups {
		t.Inputs[i] = task.Input{Lambda: refs[i].Lambda, ID: refs[i].ID, Status: u.Status, Result: u.Result, Error: u.Error}
		if u.ID == "" {
			t.Inputs[i].Error = task.InputGone
		}
	}
	b, err := json.Marshal(t.Inputs)
	if err != nil {
		return task.Task{}, err
	}
	if size := len(b); size <= task.MaxInputBytes {
		return t, nil
	}
	msg := fmt.Sprintf("the upstreams' results are %d bytes of JSON together; a run takes at most %d (task.MaxInputBytes)", len(b), task.MaxInputBytes)
	if _, err := task.ApplyState(ctx, c.store, t.Lambda, t.ID, func(cur task.Task) (task.Task, error) {
		return task.Fail(cur, t.Lease, msg, false, c.now().UTC(), c.cfg, 0)
	}); err != nil {
		return task.Task{}, err
	}
	return task.Task{}, task.Errorf(task.ErrConflict, "task %s: %s; it ended as fatal_failure", t.ID, msg)
}

// Heartbeat records that the lease holder is still running the task, renewing its lease.
// It fails with task.ErrStaleLease once the lease is no longer the task's, and with
// task.ErrCancelled once a cancel of the task was accepted: the caller stops its handler and
// reports the outcome Cancelled.
func (c *Controller) Heartbeat(ctx context.Context, lambda, id, lease string) error {
	_, err := task.ApplyState(ctx, c.store, lambda, id, func(t task.Task) (task.Task, error) {
		return task.Heartbeat(t, lease, c.now().UTC(), c.cfg)
	})
	return err
}

// SetResult records how a run ended and returns the task as stored, without its payload if the
// store keeps it apart (task.StateReader): the worker has it already. The task keeps at most
// task.MaxErrorBytes of r.Error. A result or error that the store cannot hold (over a DynamoDB
// item's 400 KB) still ends the task, as a fatal failure whose error says so: retrying would end
// the same way.
//
// A task whose cancel was accepted while it ran ends cancelled whatever the outcome: a result
// reported after the cancel is refused (not kept), and the task returned says cancelled. The
// outcome Cancelled is for such a task only (task.ErrConflict otherwise).
func (c *Controller) SetResult(ctx context.Context, lambda, id, lease string, r Result) (task.Task, error) {
	fn, err := c.resultTransition(ctx, lambda, lease, r)
	if err != nil {
		return task.Task{}, err
	}
	fn, send := c.ahead(ctx, lambda, fn)
	t, err := task.ApplyState(ctx, c.store, lambda, id, fn)
	if err == nil || !task.Refused(err) {
		send(ctx)
	}
	if errors.Is(err, task.ErrTooLarge) {
		what := fmt.Sprintf("the result (%d bytes)", len(r.Result))
		if r.Outcome != Success {
			what = fmt.Sprintf("the %s error (%d bytes)", r.Outcome, len(r.Error))
		}
		// A short error and no result: this write fits wherever a task does.
		t, err = task.ApplyState(ctx, c.store, lambda, id, func(t task.Task) (task.Task, error) {
			return task.Fail(t, lease, what+" does not fit in the task store", false, c.now().UTC(), c.cfg, 0)
		})
	}
	if err == nil {
		c.log.Debug("task finished a run", "lambda", lambda, "task_id", id, "attempt", t.Attempts, "status", t.Status)
	}
	return t, err
}

// resultTransition is the transition that records r of a task of lambda under lease, with r's
// log on the attempt it ends.
func (c *Controller) resultTransition(ctx context.Context, lambda, lease string, r Result) (func(task.Task) (task.Task, error), error) {
	end, err := c.endTransition(ctx, lambda, lease, r)
	if err != nil {
		return nil, err
	}
	return func(t task.Task) (task.Task, error) {
		next, err := end(t)
		return next.Logged(r.Log), err
	}, nil
}

// endTransition is the transition that ends the run of a task of lambda under lease with r's
// outcome.
func (c *Controller) endTransition(ctx context.Context, lambda, lease string, r Result) (func(task.Task) (task.Task, error), error) {
	if r.Delay != nil {
		if r.Outcome != Retriable && r.Outcome != Snoozed {
			return nil, task.Errorf(task.ErrInvalid, "a delay goes with the outcome retriable or snoozed, not %q", r.Outcome)
		}
		if err := task.CheckLater(*r.Delay); err != nil {
			return nil, err
		}
	}
	switch r.Outcome {
	case Cancelled:
		return func(t task.Task) (task.Task, error) { return task.CancelRunning(t, lease, c.now().UTC()) }, nil
	case Success:
		return func(t task.Task) (task.Task, error) { return task.Succeed(t, lease, r.Result, c.now().UTC(), c.cfg) }, nil
	case Snoozed:
		if r.Delay == nil {
			return nil, task.Errorf(task.ErrInvalid, "the outcome snoozed needs the delay to run again after")
		}
		return func(t task.Task) (task.Task, error) { return task.Snooze(t, lease, *r.Delay, c.now().UTC()) }, nil
	case Retriable, Fatal:
		if r.Delay != nil {
			return func(t task.Task) (task.Task, error) {
				return task.RetryAfter(t, lease, r.Error, *r.Delay, c.now().UTC())
			}, nil
		}
		cfg := c.configOf(ctx, lambda)
		return func(t task.Task) (task.Task, error) {
			return task.Fail(t, lease, r.Error, r.Outcome == Retriable, c.now().UTC(), cfg, c.jitter())
		}, nil
	}
	return nil, task.Errorf(task.ErrInvalid, "outcome %q is not one of success, retriable, fatal, cancelled, snoozed", r.Outcome)
}

// configOf is the task config of lambda's tasks: with its own backoff, if Config.Lambdas lists
// it with one. A lambda it cannot read takes the default backoff: its run is recorded all the
// same.
func (c *Controller) configOf(ctx context.Context, lambda string) task.Config {
	if c.lambdas == nil {
		return c.cfg
	}
	l, ok, err := c.lambdas.Lambda(ctx, lambda)
	if err != nil {
		c.log.Warn("could not read the lambda's backoff; its retry takes the default", "lambda", lambda, "err", err)
	}
	if err != nil || !ok {
		return c.cfg
	}
	return l.Config(c.cfg)
}

// limitsOf is the limits of lambda's starts (task.Limits), from Config.Lambdas; none without it
// or for a lambda it does not list. A catalog that cannot be read fails the claim: a start must
// not pass a limit it could not see.
func (c *Controller) limitsOf(ctx context.Context, lambda string) (task.Limits, error) {
	if c.lambdas == nil {
		return task.Limits{}, nil
	}
	l, _, err := c.lambdas.Lambda(ctx, lambda)
	if err != nil {
		return task.Limits{}, fmt.Errorf("reading the lambda's limits: %w", err)
	}
	return l.Limits, nil
}

// Release hands a task back untried, as when its executor shuts down.
func (c *Controller) Release(ctx context.Context, lambda, id, lease string) error {
	_, err := task.ApplyState(ctx, c.store, lambda, id, func(t task.Task) (task.Task, error) {
		return task.Release(t, lease, c.now().UTC())
	})
	return err
}

// Unclaim hands back untried the claim made for delivery by the call of token, if that claim
// still holds the task: its caller never got the claim's answer (the call failed in a way that
// leaves the write unknown: a timeout, a lost response) and will run nothing under it, so the
// attempt does not count (task.Unclaim). The lease is the claim call's (task.DeliveryLease),
// which only that caller can compute. It fails with task.ErrStaleLease when no claim of that
// call holds the task: the claim was never written, or the task has moved on; with
// task.ErrConflict once task.MaxHandBacks claims of the attempt were handed back; and with
// task.ErrInvalid without a token, since every tokenless caller of a delivery shares its lease
// and one may be running it.
func (c *Controller) Unclaim(ctx context.Context, lambda, id, delivery, token string) error {
	if delivery == "" || token == "" {
		return task.Errorf(task.ErrInvalid, "unclaim of task %s needs the delivery and the token its claim was made with", id)
	}
	_, err := task.ApplyState(ctx, c.store, lambda, id, func(t task.Task) (task.Task, error) {
		return task.Unclaim(t, task.DeliveryLease(lambda, id, delivery, token, t.Attempts), c.now().UTC())
	})
	if err == nil {
		c.log.Info("claim handed back: its answer was lost, its handler never ran", "lambda", lambda, "task_id", id)
	}
	return err
}

// errUnwritten marks a claim that failed before it could write anything: its caller has
// nothing to hand back (Unwritten).
var errUnwritten = errors.New("the claim was not written")

func unwritten(err error) error { return fmt.Errorf("%w: %w", errUnwritten, err) }

// Unwritten reports whether err is that of a claim made in this process that failed before any
// write of it could have been made (its gates could not be read, or its caller had given up
// before it started): there is nothing to hand back.
func Unwritten(err error) bool { return errors.Is(err, errUnwritten) }
