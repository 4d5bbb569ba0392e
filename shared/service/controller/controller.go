// Package controller runs one lambda's tasks on one machine: it receives messages from the
// lambda's queues in strict priority order into a small in-memory priority buffer, claims each
// task, and hands it to an executor slot. `atf dev` runs one per lambda; so does the ECS executor
// (functions/executor).
//
// Two goroutines share the buffer. The fetcher keeps it topped up: it receives, highest priority
// first, as many messages as the free slots plus Config.Prefetch, and long-polls the highest
// priority queue when the buffer and every queue are empty. The dispatcher starts the highest
// priority buffered message whenever a slot is free. Priority stays strict despite the buffer:
// before it starts a buffered message below the highest priority, the dispatcher lets the
// fetcher's receives in flight land and then looks at the queues above it (without waiting), so
// a high-priority task that arrived while the slots were busy starts before any lower one already
// buffered. (On SQS a receive that does not wait samples some of the queue's servers and can miss
// a message now and then; the controller without a buffer had that limit too.) Higher messages
// never evict lower ones from the buffer: a message that goes back to its queue counts towards
// the queue's dead-letter receive count, and the look at the queues above makes eviction needless.
//
// A buffered message stays hidden in its queue: the controller extends its visibility while it
// waits for a slot, and Stop releases every buffered message (visible again at once) so another
// controller runs it without waiting out its visibility. With Prefetch zero (the default, and what
// `atf dev` uses) the controller never holds more messages than it has free slots.
package controller

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// Defaults of Config.
const (
	// DefaultIdleWait is how long the controller long-polls its highest priority queue when all
	// its queues are empty.
	DefaultIdleWait = 20 * time.Millisecond
	// DefaultVisibility hides a received message while it is buffered and until its claim is
	// settled; the controller extends it for messages that wait for a slot. An unsettled one
	// (the claim call failed) comes back after it.
	DefaultVisibility = 30 * time.Second
)

// MaxReceive is the most messages the controller asks one Receive for: SQS's limit per call.
const MaxReceive = 10

// releaseTimeout bounds the calls that hand messages and tasks back at shutdown, which run after
// the controller's contexts are done.
const releaseTimeout = 10 * time.Second

// Config configures a Controller.
type Config struct {
	Lambda   task.Lambda // with defaults applied; Concurrency is the number of slots
	Handler  worker.Handler
	Queue    task.Queue
	Executor *executor.Executor
	IdleWait time.Duration // DefaultIdleWait if zero
	// Visibility hides received messages; DefaultVisibility if zero. A buffered message is
	// extended by Visibility when less than half of it is left.
	Visibility time.Duration
	// Prefetch is how many messages the controller may hold beyond its free slots, so a slot
	// that frees starts its next task without waiting for a Receive, and messages arrive in
	// batches. Zero (the default) holds none beyond the free slots. Held messages are hidden
	// from other controllers of the lambda, so keep it small: about the number of slots, at
	// most MaxReceive, is plenty.
	Prefetch int
	// MessageTimesLease keeps a claimed task's message hidden in its queue, extended by
	// Visibility while the task runs here, and deletes it once the run's end is written: its
	// visibility times the lease (status.WithMessage), so the store keeps no timer for it. Set
	// it for a durable queue (SQS) only: a message lost with its queue would leave its task's
	// lease untimed. Unset, the message is deleted once the claim is settled.
	MessageTimesLease bool
	Logger            *slog.Logger
}

// Controller feeds one lambda's executors.
type Controller struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	buf      buffer
	running  int  // slots in use: tasks taken from the buffer and not yet done
	stopping bool // set by Stop: nothing more is buffered or started
	// receiving counts the fetcher's receives in flight, by priority index: messages that have
	// left their queue but are not in the buffer yet.
	receiving []int
	// fetcherParked is set when the fetcher's last look found the buffer covering the free slots
	// (and Prefetch): it receives nothing until a slot frees. Only tests read it, to see that
	// the controller chose not to receive.
	fetcherParked bool
	observe       observer

	// capped are the messages of claims a concurrency cap held (task.Held with no Until), hidden
	// until their hold ends, oldest first: the end of a run here may free a place, and wakes the
	// oldest still hidden (wake), rather than leave the place idle until a hold ends.
	capped []cappedMessage

	fetchKick chan struct{} // the fetcher may have room for more messages
	takeKick  chan struct{} // the dispatcher may have a message and a free slot

	stopOnce  sync.Once
	stopRecv  context.CancelFunc // stops the fetcher, the dispatcher and the keeper
	stopPoll  context.CancelFunc // abandons a Receive in flight
	stopTasks context.CancelFunc // stops running handlers, which release their tasks
	tasks     sync.WaitGroup     // in-flight tasks

	fetchDone, dispatchDone, keepDone chan struct{} // closed when each goroutine returns
}

// observer is a test seam: hooks called where the controller has finished with something, so a
// test can assert that something did not happen without waiting a while for it. Its hooks are
// nil outside tests.
type observer struct {
	// settled is called when the controller is done with a delivery it took from the buffer:
	// the claim was answered, the message deleted or handed back, and a claimed task has run.
	settled func(task.Delivery)
	// draining is called when Stop has handed back the buffered messages and begins to wait for
	// the running tasks.
	draining func()
}

// Start starts the controller; Stop ends it.
func Start(c Config) *Controller { return start(c, observer{}) }

func start(c Config, o observer) *Controller {
	if c.IdleWait <= 0 {
		c.IdleWait = DefaultIdleWait
	}
	if c.Visibility <= 0 {
		c.Visibility = DefaultVisibility
	}
	c.Prefetch = max(c.Prefetch, 0)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	recvCtx, stopRecv := context.WithCancel(context.Background())
	pollCtx, stopPoll := context.WithCancel(context.Background())
	taskCtx, stopTasks := context.WithCancel(context.Background())
	ctl := &Controller{
		cfg: c, log: c.Logger.With("lambda", c.Lambda.Name),
		buf:       newBuffer(len(c.Lambda.Priorities)),
		receiving: make([]int, len(c.Lambda.Priorities)),
		fetchKick: make(chan struct{}, 1), takeKick: make(chan struct{}, 1),
		stopRecv: stopRecv, stopPoll: stopPoll, stopTasks: stopTasks,
		fetchDone: make(chan struct{}), dispatchDone: make(chan struct{}), keepDone: make(chan struct{}),
		observe: o,
	}
	go ctl.fetch(recvCtx, pollCtx)
	go ctl.dispatch(recvCtx, pollCtx, taskCtx)
	go ctl.keep(recvCtx)
	return ctl
}

// Stop stops taking tasks and hands every buffered message back to its queue at once. It waits
// for the running tasks to finish until ctx is done; then it stops their handlers, and their
// tasks are released for another run. A Receive in flight is waited for (at most IdleWait, unless
// ctx ends first) and what it brings is handed back too. A second Stop is a no-op.
func (c *Controller) Stop(ctx context.Context) {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopping = true
		c.mu.Unlock()
		c.stopRecv()
		quit := make(chan struct{})
		defer close(quit)
		go func() {
			select {
			case <-ctx.Done():
				c.stopPoll()
				c.stopTasks()
			case <-quit:
			}
		}()
		// No task starts any more, and no extension can hide a message after its release.
		<-c.dispatchDone
		<-c.keepDone
		c.mu.Lock()
		held := c.buf.drain()
		c.mu.Unlock()
		if len(held) > 0 {
			c.release(held)
			c.log.Info("released buffered messages", "messages", len(held))
		}
		if c.observe.draining != nil {
			c.observe.draining()
		}
		c.tasks.Wait()
		<-c.fetchDone
		c.stopTasks()
		c.stopPoll()
	})
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// want returns how many messages the fetcher should receive now: none while the buffer covers
// the free slots and is at least half full; otherwise enough to fill it. It also reports whether
// the buffer is empty.
func (c *Controller) want() (n int, empty bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return 0, false
	}
	free := c.cfg.Lambda.Concurrency - c.running
	room := free + c.cfg.Prefetch - c.buf.len()
	if c.buf.len() < free || room >= max(1, c.cfg.Prefetch/2) {
		n = max(room, 0)
	}
	c.fetcherParked = n == 0
	return n, c.buf.len() == 0
}

// fetch keeps the buffer topped up until stop ends. Its receives run on poll, which Stop cancels
// only when its own deadline passes: SQS may still deliver to an abandoned long poll, and such a
// message would stay hidden for its whole visibility.
//
// It long-polls only while the buffer is empty. With messages buffered, a pass that finds nothing
// is followed by a pause of IdleWait (or until a slot frees) and a short pass: the dispatcher
// waits for the fetcher's receives in flight before it starts a lower priority message, so they
// must stay short.
func (c *Controller) fetch(stop, poll context.Context) {
	defer close(c.fetchDone)
	idle := false // the last pass found every queue empty
	for stop.Err() == nil {
		n, empty := c.want()
		if n > 0 && idle && !empty {
			if !sleep(stop, c.cfg.IdleWait, c.fetchKick) {
				return
			}
			idle = false
			continue
		}
		if n == 0 {
			idle = false
			select {
			case <-c.fetchKick:
			case <-stop.Done():
			}
			continue
		}
		began := time.Now()
		got, ok := c.pass(stop, poll, n, idle)
		switch {
		case !ok:
			// Don't hammer a queue that fails: rest before the next pass.
			sleep(stop, c.cfg.IdleWait, nil)
		case got == 0 && idle:
			// A long poll may end early and empty (the in-memory queue ends it once another
			// priority of the lambda has a message, even one of a priority no longer polled):
			// passes that find nothing start at most once an IdleWait, or when a slot frees.
			if rest := c.cfg.IdleWait - time.Since(began); rest > 0 && !sleep(stop, rest, c.fetchKick) {
				return
			}
		}
		idle = got == 0
	}
}

// pass receives up to n messages from the queues in priority order: it moves to the next queue
// only when one returns fewer messages than asked. When the previous pass found nothing, it
// long-polls the highest priority for IdleWait instead of sleeping: a high-priority task then
// starts the moment it arrives, and an idle controller on SQS makes a few requests a second
// rather than a busy loop. It reports false if a Receive failed.
func (c *Controller) pass(stop, poll context.Context, n int, idle bool) (got int, ok bool) {
	var wait time.Duration
	if idle {
		wait = c.cfg.IdleWait
	}
	for i := range c.cfg.Lambda.Priorities {
		for n > 0 && stop.Err() == nil {
			ask := min(n, MaxReceive)
			k, err := c.receive(poll, i, ask, wait, true)
			if err != nil {
				return got, false
			}
			wait = 0
			got += k
			n -= k
			if k < ask {
				break
			}
		}
	}
	return got, true
}

// receive takes up to n (at most MaxReceive) messages of the priority of index i into the buffer,
// or hands them back at once if the controller is stopping. The fetcher's receives are tracked,
// so the dispatcher can wait for what they bring.
func (c *Controller) receive(ctx context.Context, i, n int, wait time.Duration, tracked bool) (int, error) {
	p := c.cfg.Lambda.Priorities[i]
	if tracked {
		c.mu.Lock()
		c.receiving[i]++
		c.mu.Unlock()
		defer kick(c.takeKick)
	}
	until := time.Now().Add(c.cfg.Visibility) // the queue's clock starts after this
	ds, err := c.cfg.Queue.Receive(ctx, task.ReceiveParams{
		Lambda: c.cfg.Lambda.Name, Priority: p, Max: min(n, MaxReceive), Wait: wait, Visibility: c.cfg.Visibility,
	})
	c.mu.Lock()
	if tracked {
		c.receiving[i]--
	}
	if err != nil {
		c.mu.Unlock()
		if ctx.Err() == nil {
			c.log.Warn("receive failed", "priority", p, "err", err)
		}
		return 0, err
	}
	if c.stopping {
		c.mu.Unlock()
		hs := make([]*held, len(ds))
		for j, d := range ds {
			hs[j] = &held{d: d}
		}
		c.release(hs)
		return len(ds), nil
	}
	for _, d := range ds {
		c.buf.push(&held{d: d, prio: i, hiddenUntil: until})
	}
	c.mu.Unlock()
	if len(ds) > 0 {
		kick(c.takeKick)
	}
	return len(ds), nil
}

// dispatch starts the best buffered message whenever a slot is free, until stop ends.
func (c *Controller) dispatch(stop, poll, taskCtx context.Context) {
	defer close(c.dispatchDone)
	for {
		h, ok := c.take(stop, poll)
		if !ok {
			return
		}
		c.tasks.Add(1)
		go func() {
			defer c.done()
			c.run(taskCtx, h)
			if c.observe.settled != nil {
				c.observe.settled(h.d)
			}
		}()
	}
}

// take waits for a free slot and a buffered message, and takes the slot and the highest priority
// message. Before it takes a message below the highest priority, it lets the fetcher's receives
// from the queues above it land (waiting at most IdleWait), then receives from those queues
// itself, without waiting: what they hold goes first. It reports false once stop ends.
func (c *Controller) take(stop, poll context.Context) (*held, bool) {
	checked, landed := false, false
	var landing <-chan time.Time // the end of the wait for the fetcher's receives
	for {
		c.mu.Lock()
		if c.stopping || stop.Err() != nil {
			c.mu.Unlock()
			return nil, false
		}
		free := c.cfg.Lambda.Concurrency - c.running
		if free > 0 && c.buf.len() > 0 {
			best := c.buf.best()
			if best > 0 && !landed && slices.ContainsFunc(c.receiving[:best], func(n int) bool { return n > 0 }) {
				if landing == nil {
					landing = time.After(c.cfg.IdleWait)
				}
				c.mu.Unlock()
				select {
				case <-c.takeKick:
				case <-landing:
					landed = true
				case <-stop.Done():
					return nil, false
				}
				continue
			}
			if best > 0 && !checked {
				c.mu.Unlock()
				checked = true
				for i := 0; i < best; i++ {
					if k, err := c.receive(poll, i, free, 0, false); err == nil && k > 0 {
						break // the buffer now holds something better
					}
				}
				continue
			}
			h := c.buf.pop()
			c.running++
			c.mu.Unlock()
			return h, true
		}
		c.mu.Unlock()
		select {
		case <-c.takeKick:
		case <-stop.Done():
			return nil, false
		}
	}
}

// done frees the slot of a finished task.
func (c *Controller) done() {
	c.mu.Lock()
	c.running--
	c.mu.Unlock()
	kick(c.fetchKick)
	kick(c.takeKick)
	c.tasks.Done()
}

// keep extends the visibility of buffered messages before it runs out, until stop ends. An
// extension in flight is not abandoned when stop ends: Stop releases the messages after it, and
// the two calls must not cross.
func (c *Controller) keep(stop context.Context) {
	defer close(c.keepDone)
	tick := time.NewTicker(max(c.cfg.Visibility/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-stop.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		c.mu.Lock()
		due := c.buf.expiring(now.Add(c.cfg.Visibility / 2))
		c.mu.Unlock()
		dropped := false
		for _, h := range due {
			if stop.Err() != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			err := c.cfg.Queue.Extend(ctx, h.d, c.cfg.Visibility)
			cancel()
			c.mu.Lock()
			switch {
			case err == nil:
				h.hiddenUntil = now.Add(c.cfg.Visibility)
			case errors.Is(err, task.ErrNotFound):
				// Visible again, or deleted: it is no longer this controller's to run.
				if c.buf.remove(h) {
					dropped = true
					c.log.Warn("buffered message expired before it was extended; dropped from the buffer", "task_id", h.d.TaskID)
				}
			default:
				c.log.Warn("extend buffered message failed", "task_id", h.d.TaskID, "err", err)
			}
			c.mu.Unlock()
		}
		if dropped {
			kick(c.fetchKick)
		}
	}
}

// release makes messages visible again at once, for another controller or a later receive.
func (c *Controller) release(hs []*held) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Go(func() {
			if err := c.cfg.Queue.Extend(ctx, h.d, 0); err != nil && !errors.Is(err, task.ErrNotFound) {
				c.log.Warn("release message failed; it comes back after its visibility", "task_id", h.d.TaskID, "err", err)
			}
		})
	}
	wg.Wait()
}

// sleep waits for d, or until wake (if not nil) fires; it reports false if ctx ends first.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
		return false
	}
	return true
}

// run claims the task of h's message and runs it. Unless the message times the lease
// (MessageTimesLease), it is deleted once the claim is settled either way: from then on the
// store's timeouts, not the queue, keep the task alive. If it does, it stays hidden while the
// task runs and is deleted once the run's end is written; a message whose run ended otherwise
// comes back, and its claim times the attempt out.
func (c *Controller) run(ctx context.Context, h *held) {
	d := h.d
	claimCtx := status.WithState(status.WithNonce(ctx, d.Nonce), d.State)
	unhide := func() {}
	if c.cfg.MessageTimesLease {
		// Hidden from now on, not from the claim's answer: a slow claim must not let the
		// message come back under a lease it times.
		unhide = c.hide(h)
		defer unhide()
		claimCtx = status.WithMessage(claimCtx, d.ID)
	}
	executor.AwaitRunAt(ctx, d.Message) // a stop shows in the claim below
	t, err := c.cfg.Executor.Claim(claimCtx, d.Lambda, d.TaskID, d.Receipt)
	claimed := err == nil
	switch {
	case claimed:
	case errors.Is(err, task.ErrConflict), errors.Is(err, task.ErrNotFound):
		// A duplicate message, or the task was finished, cancelled or dropped meanwhile.
		c.log.Debug("message discarded", "task_id", d.TaskID, "reason", err)
	case ctx.Err() != nil:
		// Stopped while claiming: hand the message back now rather than after its visibility.
		unhide()
		c.release([]*held{{d: d}})
		return
	case errors.Is(err, task.ErrHeld):
		// The claim started nothing (with MessageTimesLease too: no lease for the message to
		// time); a rate may have booked the task a slot (task.Task.RateSlot).
		unhide()
		c.holdBack(ctx, d, err)
		return
	case errors.Is(err, task.ErrNotDue):
		c.log.Info("claim refused as early, or the task runs under a lease its message times; the message will come back", "task_id", d.TaskID, "err", err)
		if due, ok := task.DueAt(err); ok {
			// Back when its task is due (its run time, or the end of the lease the message
			// times), a second at least, not after the visibility it has.
			unhide()
			c.hideFor(ctx, d, executor.DueDelay(due, time.Now()))
		}
		return
	default:
		c.log.Warn("claim failed; the message will come back", "task_id", d.TaskID, "err", err)
		return
	}
	if claimed {
		defer c.wake(ctx)
	}
	if claimed && c.cfg.MessageTimesLease {
		settled := c.cfg.Executor.Run(ctx, c.cfg.Lambda, c.cfg.Handler, t)
		unhide()
		if !settled {
			c.log.Warn("the run's end is not in the store; its message comes back to time the attempt out", "task_id", d.TaskID)
			return
		}
		c.delete(ctx, d)
		return
	}
	unhide()
	c.delete(ctx, d)
	if !claimed {
		return
	}
	// The executor releases the task if ctx ends before or while it runs.
	c.cfg.Executor.Run(ctx, c.cfg.Lambda, c.cfg.Handler, t)
}

// holdBack brings back the message of d, whose claim a limit held (task.ErrHeld), when the
// limit may let its task start (executor.HoldDelay), rather than after its visibility: it hides
// it until then or, from executor.HoldResendAt receives, sends it again delayed until then and
// deletes it, so that a task held for long never takes its message to a dead-letter queue. If
// the send fails, the message is hidden; if that fails too, it comes back after its visibility.
func (c *Controller) holdBack(ctx context.Context, d task.Delivery, held error) {
	delay := executor.HoldDelay(held, d.ReceiveCount, time.Now())
	log := c.log.With("task_id", d.TaskID, "receive_count", d.ReceiveCount, "back_in", delay, "held", held)
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if executor.HoldResend(d.ReceiveCount) {
		err := c.cfg.Queue.Send(qctx, executor.Resent(d.Message, delay))
		if err == nil {
			c.delete(ctx, d)
			log.Debug("claim held by a limit; its message is sent again")
			return
		}
		log.Warn("claim held by a limit, and its message could not be sent again; hidden instead", "err", err)
	}
	if err := c.cfg.Queue.Extend(qctx, d, delay); err != nil && !errors.Is(err, task.ErrNotFound) {
		log.Warn("claim held by a limit, and its message could not be hidden until then; it comes back after its visibility", "err", err)
		return
	}
	log.Debug("claim held by a limit; its message comes back then")
	if _, rated := task.HeldUntil(held); !rated {
		c.mu.Lock()
		if len(c.capped) == maxCapped {
			c.capped = c.capped[1:]
		}
		c.capped = append(c.capped, cappedMessage{d: d, until: time.Now().Add(delay)})
		c.mu.Unlock()
	}
}

// cappedMessage is the message of a claim a cap held, hidden until until.
type cappedMessage struct {
	d     task.Delivery
	until time.Time
}

// maxCapped bounds the messages held by a cap that a controller remembers to wake: a slot frees
// one at a time, and the others come back at the end of their holds anyway.
const maxCapped = 1000

// wake makes the oldest message that a cap held, and that is still hidden, visible at once: the
// run that just ended here may have freed its place. One whose hold is over is forgotten: it
// came back by itself, and its receipt may be stale. Best effort: at worst the message comes back
// at the end of its hold, as without.
func (c *Controller) wake(ctx context.Context) {
	c.mu.Lock()
	now := time.Now()
	var d task.Delivery
	found := false
	for len(c.capped) > 0 && !found {
		m := c.capped[0]
		c.capped = c.capped[1:]
		// A margin: a message whose hold ends this close comes back as soon by itself.
		found = m.until.Sub(now) > 100*time.Millisecond
		d = m.d
	}
	c.mu.Unlock()
	if !found {
		return
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := c.cfg.Queue.Extend(qctx, d, 0); err != nil && !errors.Is(err, task.ErrNotFound) {
		c.log.Debug("could not wake a message a cap held; it comes back at the end of its hold", "task_id", d.TaskID, "err", err)
	}
}

// hideFor hides d's message for visibility from now, best effort: if that fails it comes back
// after the visibility it has.
func (c *Controller) hideFor(ctx context.Context, d task.Delivery, visibility time.Duration) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := c.cfg.Queue.Extend(qctx, d, visibility); err != nil && !errors.Is(err, task.ErrNotFound) {
		c.log.Warn("could not hide a message until its task is due; it comes back after its visibility", "task_id", d.TaskID, "err", err)
	}
}

// delete deletes d's message for good, even once ctx is done.
func (c *Controller) delete(ctx context.Context, d task.Delivery) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := c.cfg.Queue.Delete(dctx, d); err != nil {
		c.log.Warn("delete message failed", "task_id", d.TaskID, "err", err)
	}
}

// hide keeps the message of h hidden while its task is claimed and runs (MessageTimesLease): it
// extends it by Visibility whenever less than half of it is left (at once, if so already), until
// the func it returns is called, which waits for an extension in flight. It runs apart from
// keep, which ends at Stop, since running tasks outlive it. An extension that finds the message
// visible again stops: its next claim decides (status.Controller.Claim).
func (c *Controller) hide(h *held) (done func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	c.mu.Lock()
	until := h.hiddenUntil // keep may have extended it before h left the buffer
	c.mu.Unlock()
	go func() {
		defer close(finished)
		tick := time.NewTicker(max(c.cfg.Visibility/4, 10*time.Millisecond))
		defer tick.Stop()
		for first := true; ; first = false {
			if !first {
				select {
				case <-quit:
					return
				case <-tick.C:
				}
			}
			now := time.Now()
			if until.Sub(now) > c.cfg.Visibility/2 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			err := c.cfg.Queue.Extend(ctx, h.d, c.cfg.Visibility)
			cancel()
			switch {
			case err == nil:
				until = now.Add(c.cfg.Visibility)
			case errors.Is(err, task.ErrNotFound):
				c.log.Warn("the message of a running task came back before it was extended; its claim keeps it while the lease lasts", "task_id", h.d.TaskID)
				return
			default:
				c.log.Warn("extend the message of a running task failed", "task_id", h.d.TaskID, "err", err)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-finished
	}
}
