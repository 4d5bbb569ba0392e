package sqsworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// DefaultMargin is how long before the invocation deadline Handle stops claiming tasks and stops
// running handlers: enough to stop a handler (a program is killed within two seconds) and to
// report its release or result (the executor bounds that call at ten seconds).
const DefaultMargin = 15 * time.Second

// DefaultSlack is how much of the lambda's timeout an invocation, or a record, may lack and still
// count as given all of it: Lambda starts the function's clock before it hands over the event, and
// a claim and the task's start take their time. The stack sizes the function at exactly the
// lambda's timeout plus the margin, so without slack every invocation would look short.
const DefaultSlack = time.Second

// A record failed for a transient reason (its claim failed, or too little time was left to
// claim it) is hidden for RetryDelay(receive count) instead of the queue's visibility timeout,
// which is six times the function's: it comes back in seconds, later on each receive so that a
// long outage does not send it to the dead-letter queue within a minute. The call that shortens
// it takes at most retryCallTimeout and is best effort: on failure the queue's timeout holds.
const (
	RetryDelayBase   = 2 * time.Second
	RetryDelayMax    = time.Minute
	retryCallTimeout = 2 * time.Second
)

// RetryDelay is how long a record failed for a transient reason stays hidden after its
// receiveCount-th receive: RetryDelayBase, doubled on each later receive, at most RetryDelayMax.
func RetryDelay(receiveCount int) time.Duration {
	d := RetryDelayBase
	for i := 1; i < receiveCount && d < RetryDelayMax; i++ {
		d *= 2
	}
	return min(d, RetryDelayMax)
}

// Visibility changes how long a received message stays hidden: sqsqueue.Queue.
type Visibility interface {
	Extend(ctx context.Context, d task.Delivery, visibility time.Duration) error
}

// Sender sends messages to the lambda's queues (sqsqueue.Queue): a message held by a limit for
// many receives is sent again afresh (holdBack).
type Sender interface {
	Send(ctx context.Context, msgs ...task.Message) error
}

// BatchVisibility is a Visibility that changes many messages' at once (sqsqueue.Queue): a batch's
// messages are kept hidden while it runs with one call per third of a heartbeat timeout
// (keepHidden).
type BatchVisibility interface {
	ExtendAll(ctx context.Context, ds []task.Delivery, visibility time.Duration) error
}

// Config configures a Handler.
type Config struct {
	// Lambda is the lambda whose queues feed the function; zero fields take their defaults.
	// Concurrency bounds the records that run at once, Timeout one run of the handler.
	Lambda task.Lambda
	// Handler runs the lambda's tasks. Required.
	Handler worker.Handler
	// Status is the heartbeat and status controller: the status function on AWS. Required.
	Status executor.Status
	// Task holds the timings the executor keeps (heartbeat interval and timeout, lease margin): the status controller's. Zero fields take their defaults.
	Task task.Config
	// Abandon replaces the executor's default for a stopped handler that does not return: see
	// executor.Config. Tests set it; the function leaves it nil, which ends the process.
	Abandon func(task.Task)
	// Margin is how long before the invocation deadline handlers are stopped and no more tasks
	// are claimed; DefaultMargin if zero.
	Margin time.Duration
	// Queue, if set, shortens the visibility of a record failed for a transient reason, so it
	// comes back after RetryDelay rather than the queue's visibility timeout. Poison records keep
	// the queue's. A record held by a limit is hidden until the limit may let it start; if Queue
	// is also a Sender, it is sent again from executor.HoldResendAt receives (holdBack). Nil:
	// every failed record waits for the queue's timeout.
	Queue Visibility
	// Slack is how much less than the lambda's Timeout an invocation may have at its start (or a
	// record at its claim), less Margin, and still count as given the full Timeout; DefaultSlack
	// if zero.
	Slack time.Duration
	// Metrics, if set, observes the handler runs (executor.Config.Metrics).
	Metrics executor.HandlerMetrics
	// Worker names the executor in the attempts it runs (executor.Config.Worker): the function's
	// log stream (AWS_LAMBDA_LOG_STREAM_NAME).
	Worker string
	// LogGroup is the function's log group (AWS_LAMBDA_LOG_GROUP_NAME). If set, each claim names
	// where its attempt's logs are (status.WithLogLocation): this group, the Worker as its
	// stream, and the invocation's request id.
	LogGroup string
	// LogHandlerOutput logs, with Logger, each line a handler writes to its attempt's log
	// (executor.Config.LogHandlerOutput): the worker function sets it, since on AWS the store
	// keeps no attempt logs and a program's standard error would otherwise reach CloudWatch only
	// as a failure's tail.
	LogHandlerOutput bool
	// Logger is slog.Default() if nil.
	Logger *slog.Logger
}

// Handler runs the SQS batches of one lambda's worker function. It is safe for concurrent use.
type Handler struct {
	cfg  Config
	exec *executor.Executor
	log  *slog.Logger
	// warnedShort: the function's timeout was found too short for the lambda's, and said so. A
	// function's timeout does not change while its instance lives, so once is enough: a record
	// per batch would only add to the log bill.
	warnedShort atomic.Bool
}

// New returns a Handler, or an error naming the first field of c that is wrong.
func New(c Config) (*Handler, error) {
	c.Lambda = c.Lambda.WithDefaults()
	if err := c.Lambda.Validate(); err != nil {
		return nil, fmt.Errorf("sqsworker: Lambda: %w", err)
	}
	if c.Handler == nil {
		return nil, errors.New("sqsworker: Handler is required")
	}
	if c.Status == nil {
		return nil, errors.New("sqsworker: Status is required")
	}
	c.Task = c.Task.WithDefaults()
	if err := c.Task.Validate(); err != nil {
		return nil, fmt.Errorf("sqsworker: %w", err)
	}
	if c.Margin < 0 {
		return nil, fmt.Errorf("sqsworker: Margin must not be negative, got %s", c.Margin)
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.Slack < 0 {
		return nil, fmt.Errorf("sqsworker: Slack must not be negative, got %s", c.Slack)
	}
	if c.Slack == 0 {
		c.Slack = DefaultSlack
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	// The executor adds the lambda, task id and attempt to its own records.
	// A run that succeeded is logged at debug: the batch's summary counts it (Handle).
	return &Handler{cfg: c, exec: executor.New(c.Status, executor.Config{Task: c.Task, Logger: c.Logger, Abandon: c.Abandon, Metrics: c.Metrics, Worker: c.Worker, QuietSuccess: true, LogHandlerOutput: c.LogHandlerOutput}), log: c.Logger.With("lambda", c.Lambda.Name)}, nil
}

// errOutOfTime is the cause a handler's context carries when the invocation is about to end.
var errOutOfTime = errors.New("the worker function's invocation is about to time out")

// budget is the time an invocation gives its tasks.
type budget struct {
	end   time.Time // the invocation deadline less Margin; zero when ctx has no deadline
	short bool      // at the start, the invocation had less than the lambda's Timeout, less Slack, until end
}

func (b budget) over() bool { return !b.end.IsZero() && !time.Now().Before(b.end) }

// Handle runs one batch and reports the records whose message must come back: see the package
// documentation. It returns when every record is settled, and never returns an error.
func (h *Handler) Handle(ctx context.Context, e events.SQSEvent) (events.SQSEventResponse, error) {
	log := h.log
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		log = log.With("request_id", lc.AwsRequestID)
	}
	var b budget
	if deadline, ok := ctx.Deadline(); ok {
		b.end = deadline.Add(-h.cfg.Margin)
		if left := time.Until(b.end); left < h.cfg.Lambda.Timeout-h.cfg.Slack {
			b.short = true
			if !h.warnedShort.Swap(true) {
				log.Warn("the function's timeout is shorter than the lambda's timeout plus the margin: handlers get the time left, and running out of it counts as a timed-out attempt (logged once per function instance)",
					"time_left", left, "timeout", h.cfg.Lambda.Timeout, "margin", h.cfg.Margin)
			}
		}
	}

	hidden := h.keepHidden(ctx, log, e)
	failed := make([]bool, len(e.Records))
	slots := make(chan struct{}, h.cfg.Lambda.Concurrency)
	var wg sync.WaitGroup
	for i, m := range e.Records {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			// A record that gives its message a visibility of its own (a hold, a retry, the
			// lease's end) takes it out of the batch's extensions first (withBack).
			failed[i] = !h.record(withBack(ctx, func() { hidden.back(i) }), b, log, m)
			if failed[i] {
				hidden.back(i)
			}
		})
	}
	wg.Wait()
	hidden.stop()

	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	for i, f := range failed {
		if f {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: e.Records[i].MessageId})
		}
	}
	// One record per batch: each record that failed, or whose run failed, has one of its own.
	log.Info("batch done", "records", len(e.Records), "back", len(resp.BatchItemFailures))
	return resp, nil
}

// record settles one record and reports whether its message is done with (acknowledged).
func (h *Handler) record(ctx context.Context, b budget, log *slog.Logger, m events.SQSMessage) bool {
	log = log.With("message_id", m.MessageId, "receive_count", m.Attributes["ApproximateReceiveCount"])
	msg, err := h.decode(m.Body)
	if err != nil {
		log.Error("poison message left for the dead-letter queue", "body", clip(m.Body), "err", err)
		return false
	}
	log = log.With("task_id", msg.TaskID, "priority", msg.Priority)
	if !b.end.IsZero() {
		wctx, cancel := context.WithDeadline(ctx, b.end)
		executor.AwaitRunAt(wctx, msg) // out of time: b.over below
		cancel()
	} else {
		executor.AwaitRunAt(ctx, msg)
	}
	if b.over() {
		log.Warn("too little time left before the function's deadline to claim; the message will come back",
			"margin", h.cfg.Margin)
		h.retrySoon(ctx, log, msg, m)
		return false
	}

	t, err := h.claim(ctx, msg, m)
	switch {
	case err == nil:
	case errors.Is(err, task.ErrConflict), errors.Is(err, task.ErrNotFound):
		// A duplicate message, or the task was finished, cancelled or dropped meanwhile.
		log.Debug("message discarded", "reason", err)
		return true
	case errors.Is(err, task.ErrHeld):
		// A limit holds the start back; the claim counted no attempt and started nothing (a
		// rate may have booked the task a slot, task.Task.RateSlot).
		return h.holdBack(ctx, log, msg, m, err)
	case errors.Is(err, task.ErrNotDue):
		if due, ok := task.DueAt(err); ok {
			// The task may be claimed at due: its run time, or the end of the lease this
			// message times (a claim whose answer was lost). Back then, not sooner, to be
			// refused again; a second if our clock is past it already (SQS hides for whole
			// seconds), not a retry delay that grows with the receives.
			log.Info("claim refused as early; the message comes back when its task is due", "due", due, "err", err)
			h.hide(ctx, log, msg, m, executor.DueDelay(due, time.Now()))
			return false
		}
		// Our clock is ahead of the status controller's: the message comes back, as the task's.
		log.Info("claim refused as early; the message will come back", "err", err)
		h.retrySoon(ctx, log, msg, m)
		return false
	default:
		log.Warn("claim failed; the message will come back", "err", err)
		h.retrySoon(ctx, log, msg, m)
		return false
	}
	log = log.With("attempt", t.Attempts)

	runCtx, l := ctx, h.cfg.Lambda
	if !b.end.IsZero() {
		left := time.Until(b.end)
		if left <= 0 { // the claim took the time that was left
			if err := h.cfg.Status.Release(ctx, t.Lambda, t.ID, t.Lease); err != nil {
				log.Warn("could not release a task claimed too late; its message, back after the lease, times it out", "err", err)
				h.afterLease(ctx, log, msg, m)
				return false
			} else {
				log.Info("released a task claimed too close to the function's deadline")
			}
			return true
		}
		if b.short || left >= l.Timeout-h.cfg.Slack {
			// The function is too short for the lambda, or the task had (all but Slack of) its
			// full time: the handler gets what is left, and running out of it is a timed-out
			// attempt, so a task that never fits ends dead.
			l.Timeout = min(l.Timeout, left)
		} else {
			// Running out of time here is the invocation's doing: the executor releases the task.
			var cancel context.CancelFunc
			runCtx, cancel = context.WithDeadlineCause(ctx, b.end, errOutOfTime)
			defer cancel()
		}
	}
	if !h.exec.Run(runCtx, l, h.cfg.Handler, t) {
		// The run's end is not in the store: the message, which times the lease, must come
		// back to time the attempt out (status.WithMessage).
		h.afterLease(ctx, log, msg, m)
		return false
	}
	return true
}

// keepHidden keeps the batch's messages hidden while its records run, rather than for the
// queue's visibility timeout (six times the function's timeout): for a heartbeat timeout at once,
// and again every third of one, each time in one ChangeMessageVisibilityBatch call. A message
// times the lease of the task it claims (status.WithMessage), so an invocation that crashes
// leaves its tasks to run again a heartbeat timeout after its last extension, as the store's
// sweep would: the lease, renewed by the heartbeats up to the crash, ends a heartbeat timeout
// after the last one. A record that failed has its own visibility (retrySoon, afterLease) and is
// no longer extended (back); one that is done stays hidden until the event source mapping
// deletes it. Extensions stop at the invocation's deadline, as its end would stop them on AWS.
// Best effort: a message that comes back early is refused while its lease lasts.
func (h *Handler) keepHidden(ctx context.Context, log *slog.Logger, e events.SQSEvent) *hider {
	hd := &hider{returned: make([]bool, len(e.Records)), quit: make(chan struct{}), finished: make(chan struct{})}
	q, ok := h.cfg.Queue.(BatchVisibility)
	if !ok || len(e.Records) == 0 {
		close(hd.finished)
		return hd
	}
	hd.ds = make([]task.Delivery, len(e.Records))
	for i, m := range e.Records {
		if msg, err := h.decode(m.Body); err == nil {
			hd.ds[i] = task.Delivery{Message: msg, ID: m.MessageId, Receipt: m.ReceiptHandle}
		}
	}
	hide := func() {
		ds := hd.running()
		if len(ds) == 0 {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retryCallTimeout)
		defer cancel()
		hd.ext.Lock() // back waits for it: this extension must not land after a record's own
		defer hd.ext.Unlock()
		if err := q.ExtendAll(cctx, ds, h.cfg.Task.HeartbeatTimeout); err != nil {
			log.Warn("could not keep the batch's messages hidden while it runs; one that comes back is refused while its lease lasts", "err", err)
		}
	}
	hide()
	go func() {
		defer close(hd.finished)
		// A third: a failed or slow extension leaves two more before the message is out.
		tick := time.NewTicker(max(h.cfg.Task.HeartbeatTimeout/3, 10*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-hd.quit:
				return
			case <-ctx.Done(): // past the invocation's deadline, the runtime would have ended it
				return
			case <-tick.C:
				hide()
			}
		}
	}()
	return hd
}

// hider is what keepHidden keeps hidden of a batch.
type hider struct {
	ds       []task.Delivery // by record; empty ID: a body that does not decode
	ext      sync.Mutex      // held while an extension of the batch is under way
	mu       sync.Mutex
	returned []bool // records that failed, their message given its own visibility
	quit     chan struct{}
	finished chan struct{}
	once     sync.Once
}

// running returns the deliveries still to keep hidden.
func (hd *hider) running() []task.Delivery {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	var ds []task.Delivery
	for i, d := range hd.ds {
		if d.ID != "" && !hd.returned[i] {
			ds = append(ds, d)
		}
	}
	return ds
}

// back stops keeping record i hidden, before its message is given a visibility of its own: it
// waits for an extension already under way, which would otherwise land after, and bring the
// message back a heartbeat timeout later than meant (a hold's slot missed, a lease's end late).
func (hd *hider) back(i int) {
	hd.mu.Lock()
	hd.returned[i] = true
	hd.mu.Unlock()
	hd.ext.Lock()
	hd.ext.Unlock() //nolint:staticcheck // an empty section: it only waits for the extension in flight
}

// backKey carries, in a record's context, the func that takes the record out of its batch's
// extensions (hider.back).
type backKey struct{}

func withBack(ctx context.Context, back func()) context.Context {
	return context.WithValue(ctx, backKey{}, back)
}

// takeBack takes the record of ctx out of its batch's extensions, if it is in one.
func takeBack(ctx context.Context) {
	if back, ok := ctx.Value(backKey{}).(func()); ok {
		back()
	}
}

// stop ends the extensions, once the batch is done.
func (hd *hider) stop() {
	hd.once.Do(func() { close(hd.quit) })
	<-hd.finished
}

// afterLease hides the message of a run whose end could not be written until its lease is
// surely over (a heartbeat timeout), rather than the queue's visibility timeout: its claim then
// times the attempt out.
func (h *Handler) afterLease(ctx context.Context, log *slog.Logger, msg task.Message, m events.SQSMessage) {
	if h.cfg.Queue == nil {
		return
	}
	takeBack(ctx)
	n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retryCallTimeout)
	defer cancel()
	if err := h.cfg.Queue.Extend(ctx, task.Delivery{Message: msg, ID: m.MessageId, Receipt: m.ReceiptHandle, ReceiveCount: n}, h.cfg.Task.HeartbeatTimeout); err != nil {
		log.Warn("could not bring the message back after the lease; it comes back after the queue's visibility timeout", "err", err)
	}
}

// claim claims the task of a record. The claim, and its unclaim if it fails, end a third of the
// margin before the invocation's deadline (executor.Executor.Claim keeps part of its time for
// the unclaim): the rest of the margin answers the batch, which a runtime past its deadline loses.
func (h *Handler) claim(ctx context.Context, msg task.Message, m events.SQSMessage) (executor.Claimed, error) {
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-h.cfg.Margin/3))
		defer cancel()
	}
	if h.cfg.LogGroup != "" {
		logs := &task.LogLocation{Group: h.cfg.LogGroup, Stream: h.cfg.Worker}
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			logs.RequestID = lc.AwsRequestID
		}
		ctx = status.WithLogLocation(ctx, logs)
	}
	// The event source mapping keeps the message in flight until the invocation returns, and
	// deletes it only if its record did not fail: its visibility times the lease.
	ctx = status.WithMessage(status.WithNonce(ctx, msg.Nonce), m.MessageId)
	return h.exec.Claim(ctx, h.cfg.Lambda.Name, msg.TaskID, m.ReceiptHandle)
}

// retrySoon hides the message of a record failed for a transient reason for RetryDelay only, best
// effort: if that fails, it comes back after the queue's visibility timeout.
func (h *Handler) retrySoon(ctx context.Context, log *slog.Logger, msg task.Message, m events.SQSMessage) {
	n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	h.hide(ctx, log, msg, m, RetryDelay(n))
}

// hide hides the message of a failed record for delay, best effort, as retrySoon.
func (h *Handler) hide(ctx context.Context, log *slog.Logger, msg task.Message, m events.SQSMessage, delay time.Duration) {
	if h.cfg.Queue == nil {
		return
	}
	takeBack(ctx)
	n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	ctx, cancel := context.WithTimeout(ctx, retryCallTimeout)
	defer cancel()
	if err := h.cfg.Queue.Extend(ctx, task.Delivery{Message: msg, Receipt: m.ReceiptHandle, ReceiveCount: n}, delay); err != nil {
		log.Warn("could not bring the message back sooner; it comes back after the queue's visibility timeout", "err", err)
		return
	}
	log.Debug("the message comes back soon", "after", delay)
}

// holdBack brings back the message of a record whose claim a limit held (task.ErrHeld) when the
// limit may let its task start (executor.HoldDelay), and reports whether the record is done
// with. From executor.HoldResendAt receives it sends the message again, delayed until then, and
// acknowledges the record (Lambda deletes it): a fresh message counts its receives from one, so
// a task held for long never reaches the dead-letter queue, whose drain would count that as a
// failed trip (task.DeadLettered). Otherwise, or if the send fails, the record fails, hidden
// until then. Both best effort, as retrySoon: at worst it comes back after the queue's timeout.
func (h *Handler) holdBack(ctx context.Context, log *slog.Logger, msg task.Message, m events.SQSMessage, held error) bool {
	n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	delay := executor.HoldDelay(held, n, time.Now())
	log = log.With("back_in", delay, "held", held)
	if h.cfg.Queue == nil {
		log.Info("claim held by a limit; the message comes back after the queue's visibility timeout")
		return false
	}
	takeBack(ctx)
	ctx, cancel := context.WithTimeout(ctx, retryCallTimeout)
	defer cancel()
	if s, ok := h.cfg.Queue.(Sender); ok && executor.HoldResend(n) {
		err := s.Send(ctx, executor.Resent(msg, delay))
		if err == nil {
			log.Debug("claim held by a limit; the message is sent again")
			return true
		}
		log.Warn("claim held by a limit, and the message could not be sent again; hidden instead", "err", err)
	}
	if err := h.cfg.Queue.Extend(ctx, task.Delivery{Message: msg, Receipt: m.ReceiptHandle, ReceiveCount: n}, delay); err != nil {
		log.Warn("claim held by a limit, and the message could not be hidden until then; it comes back after the queue's visibility timeout", "err", err)
		return false
	}
	log.Debug("claim held by a limit; the message comes back then")
	return false
}

// decode returns the message in body, or why it is poison.
func (h *Handler) decode(body string) (task.Message, error) {
	var msg task.Message
	if err := json.Unmarshal([]byte(body), &msg); err != nil {
		return msg, fmt.Errorf("body is not a task message: %w", err)
	}
	if msg.TaskID == "" {
		return msg, errors.New("body names no task id")
	}
	if msg.Lambda != h.cfg.Lambda.Name {
		return msg, fmt.Errorf("body names task %q of lambda %q, but this function runs lambda %s", msg.TaskID, msg.Lambda, h.cfg.Lambda.Name)
	}
	return msg, nil
}

// clip shortens a body for the log.
func clip(s string) string {
	const n = 256
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
