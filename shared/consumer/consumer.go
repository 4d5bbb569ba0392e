// Package consumer is the store consumer: it sweeps the store for due tasks and moves each one
// on. Due new and retriable tasks go to their queues in priority order, up to a per-lambda quota
// per sweep so a flood on one lambda cannot delay another's. Tasks whose queue message or worker
// was lost come due again through their timeouts and are re-enqueued or, with their attempts
// used up, marked dead. Gates hold (pause) or discard (drop) a lambda's or collection's waiting
// tasks.
//
// Every move is a conditional write, so two consumers, or a stale due-index entry, can never move
// a task twice.
package consumer

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Config configures a Consumer. Zero fields take defaults.
type Config struct {
	Lambdas []task.Lambda // with defaults applied
	Task    task.Config
	Now     func() time.Time
	Jitter  func() float64
	Logger  *slog.Logger
}

// Consumer sweeps the store.
type Consumer struct {
	store   task.Store
	queue   task.Queue
	lambdas []task.Lambda
	cfg     task.Config
	now     func() time.Time
	jitter  func() float64
	log     *slog.Logger
	wake    chan struct{}

	stopOnce sync.Once
	stop     context.CancelFunc
	done     chan struct{}
}

// New returns a Consumer.
func New(store task.Store, queue task.Queue, c Config) *Consumer {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Consumer{
		store: store, queue: queue, lambdas: c.Lambdas, cfg: c.Task.WithDefaults(),
		now: c.Now, jitter: c.Jitter, log: c.Logger, wake: make(chan struct{}, 1),
	}
}

// Stats counts what one sweep did.
type Stats struct {
	Enqueued, TimedOut, Dead, Dropped int
	// Parked and Unparked count tasks set aside while a gate holds their collection, and put
	// back once it opens.
	Parked, Unparked int
	// Full reports that a lambda used its whole enqueue quota: more of its tasks may be due.
	Full bool
}

// Wake makes a running consumer sweep now rather than at its next poll, as when a task was just
// scheduled or a gate changed.
func (c *Consumer) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Start sweeps every poll interval (or when woken) until Stop.
func (c *Consumer) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			case <-c.wake:
			}
			st, err := c.Sweep(ctx)
			if err != nil && ctx.Err() == nil {
				c.log.Error("sweep failed", "err", err)
			}
			if st.Full {
				// A backlog: sweep again at once rather than a poll interval later. Each sweep
				// still takes every lambda in turn, each up to its quota.
				timer.Reset(0)
			} else {
				timer.Reset(c.cfg.PollInterval)
			}
		}
	}()
}

// Stop ends the sweeps and waits for the current one. A second Stop is a no-op.
func (c *Consumer) Stop() {
	c.stopOnce.Do(func() {
		if c.stop != nil {
			c.stop()
			<-c.done
		}
	})
}

// Sweep makes one pass over every lambda.
func (c *Consumer) Sweep(ctx context.Context) (Stats, error) {
	gates, err := c.store.Gates(ctx)
	if err != nil {
		return Stats{}, err
	}
	var st Stats
	var errs []error
	for _, l := range c.lambdas {
		if err := c.sweepLambda(ctx, l, gates, &st); err != nil {
			errs = append(errs, err)
		}
	}
	return st, errors.Join(errs...)
}

func (c *Consumer) sweepLambda(ctx context.Context, l task.Lambda, gates []task.Gate, st *Stats) error {
	now := c.now().UTC()
	mode, held, dropped := gatesOf(l.Name, gates)

	// Workers that went silent: their tasks fail the attempt, whatever the gate.
	stalled, err := c.store.Due(ctx, task.DueParams{Lambda: l.Name, Statuses: task.Running, Before: now, Limit: c.cfg.EnqueueQuota})
	if err != nil {
		return err
	}
	for _, t := range stalled {
		next, err := c.apply(ctx, t, func(t task.Task) (task.Task, error) { return task.Timeout(t, now, c.cfg, c.jitter()) })
		if err != nil {
			continue
		}
		st.TimedOut++
		if next.Status == task.StatusDead {
			st.Dead++
		}
		c.log.Warn("worker lost; task will run again", "lambda", t.Lambda, "task_id", t.ID, "attempt", t.Attempts, "status", next.Status)
	}

	switch mode {
	case task.GateDrop:
		return c.dropAll(ctx, l, now, st)
	case task.GatePause:
		return nil
	}
	for _, coll := range dropped {
		if err := c.dropParked(ctx, l.Name, coll, now, st); err != nil {
			return err
		}
	}
	if err := c.unpark(ctx, l.Name, held, now, st); err != nil {
		return err
	}

	quota := c.cfg.EnqueueQuota
	defer func() { st.Full = st.Full || quota == 0 }()
	ready := []task.Status{task.StatusNew, task.StatusRetriableFailure, task.StatusEnqueued}
	for _, p := range l.Priorities {
		if quota == 0 {
			break
		}
		// Tasks of held collections are read too, and parked (or dropped) below: the range
		// never holds more of them than one quota.
		due, err := c.store.Due(ctx, task.DueParams{Lambda: l.Name, Priority: p, Statuses: ready, Before: now, Limit: quota})
		if err != nil {
			return err
		}
		// Read the gates again after the tasks: a task scheduled after its gate closed must see
		// that gate, even when this sweep began before the gate changed.
		if gates, err = c.store.Gates(ctx); err != nil {
			return err
		}
		if mode, held, dropped = gatesOf(l.Name, gates); mode != task.GateOpen {
			return nil
		}
		var msgs []task.Message
		moved, aside := c.enqueue(ctx, due, held, dropped, now, st)
		quota -= aside
		for _, next := range moved {
			quota--
			if next.Status == task.StatusDead {
				st.Dead++
				continue
			}
			msgs = append(msgs, task.Message{Lambda: next.Lambda, Priority: next.Priority, TaskID: next.ID, Attempt: next.Attempts})
		}
		// Higher priorities are sent first. A failed send is not retried here: the enqueue
		// timeout brings those tasks back.
		if len(msgs) == 0 {
			continue
		}
		if err := c.queue.Send(ctx, msgs...); err != nil {
			return err
		}
		st.Enqueued += len(msgs)
	}
	return nil
}

// enqueueWriters is how many enqueue writes a sweep has in flight at once. Each is a round trip
// (a conditional PutItem, or a commit of the embedded store); one at a time they would cap a
// lambda at a few hundred enqueues a second (docs/capacity.md).
const enqueueWriters = 16

// enqueue moves the due tasks that no gate holds to enqueued (or dead, past their deadline), up
// to enqueueWriters at a time, and returns the moved tasks in due's order: earliest first. A task
// that a gate holds is parked, out of the sweep's range, or dropped if its gate drops; aside
// counts them.
func (c *Consumer) enqueue(ctx context.Context, due []task.Task, held, dropped []string, now time.Time, st *Stats) (out []task.Task, aside int) {
	moved := make([]*task.Task, len(due))
	var parked, gone atomic.Int64
	slots := make(chan struct{}, enqueueWriters)
	var wg sync.WaitGroup
	for i, t := range due {
		move := func(t task.Task) (task.Task, error) { return task.Enqueue(t, now, c.cfg) }
		count := (*atomic.Int64)(nil)
		switch {
		case slices.Contains(dropped, t.Collection):
			move, count = func(t task.Task) (task.Task, error) { return task.Drop(t, now) }, &gone
			aside++
		case slices.Contains(held, t.Collection):
			move, count = func(t task.Task) (task.Task, error) { return task.Park(t, now) }, &parked
			aside++
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			next, err := c.apply(ctx, t, move)
			switch {
			case err != nil:
			case count != nil:
				count.Add(1)
			default:
				moved[i] = &next
			}
		})
	}
	wg.Wait()
	st.Parked += int(parked.Load())
	st.Dropped += int(gone.Load())
	for _, t := range moved {
		if t != nil {
			out = append(out, *t)
		}
	}
	return out, aside
}

// endOfTime is after every trigger: a drop takes waiting tasks whenever they are due.
var endOfTime = time.Unix(0, math.MaxInt64)

// dropAll ends a dropped lambda's waiting tasks, due or not, parked or not: up to a quota per
// sweep, read from the due index's waiting lanes, which hold nothing else.
func (c *Consumer) dropAll(ctx context.Context, l task.Lambda, now time.Time, st *Stats) error {
	quota := c.cfg.EnqueueQuota
	lanes := make([]task.DueParams, 0, len(l.Priorities)+1)
	for _, p := range l.Priorities {
		lanes = append(lanes, task.DueParams{Priority: p})
	}
	lanes = append(lanes, task.DueParams{Parked: true})
	for _, lane := range lanes {
		if quota == 0 {
			st.Full = true
			return nil
		}
		lane.Lambda, lane.Statuses, lane.Before, lane.Limit = l.Name, task.Waiting, endOfTime, quota
		n, err := c.each(ctx, lane, func(t task.Task) (task.Task, error) { return task.Drop(t, now) })
		st.Dropped += n
		quota -= n
		if err != nil {
			return err
		}
	}
	st.Full = st.Full || quota == 0
	return nil
}

// dropParked ends the parked tasks of a dropped collection, up to a quota per sweep. Its tasks
// still in the waiting lanes are dropped as the sweep meets them, once due.
func (c *Consumer) dropParked(ctx context.Context, lambda, collection string, now time.Time, st *Stats) error {
	n, err := c.each(ctx, task.DueParams{
		Lambda: lambda, Parked: true, Collection: collection, Statuses: task.Waiting, Before: endOfTime, Limit: c.cfg.EnqueueQuota,
	}, func(t task.Task) (task.Task, error) { return task.Drop(t, now) })
	st.Dropped += n
	st.Full = st.Full || n == c.cfg.EnqueueQuota
	return err
}

// unpark puts parked tasks whose gate no longer holds them back in their lanes, up to a quota per
// sweep. The store skips a held collection at the cost of one entry.
func (c *Consumer) unpark(ctx context.Context, lambda string, held []string, now time.Time, st *Stats) error {
	n, err := c.each(ctx, task.DueParams{
		Lambda: lambda, Parked: true, SkipCollections: held, Statuses: task.Waiting, Before: endOfTime, Limit: c.cfg.EnqueueQuota,
	}, func(t task.Task) (task.Task, error) { return task.Unpark(t, now) })
	st.Unparked += n
	st.Full = st.Full || n == c.cfg.EnqueueQuota
	return err
}

// each applies fn to the tasks p selects and returns how many it moved.
func (c *Consumer) each(ctx context.Context, p task.DueParams, fn func(task.Task) (task.Task, error)) (int, error) {
	tasks, err := c.store.Due(ctx, p)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tasks {
		if _, err := c.apply(ctx, t, fn); err == nil {
			n++
		}
	}
	return n, nil
}

// apply writes one transition of a task as the sweep read it. A conflict means someone else
// moved the task meanwhile, and a transition error that the due entry was stale: both are
// skipped quietly, the task is looked at again when it is next due.
func (c *Consumer) apply(ctx context.Context, t task.Task, fn func(task.Task) (task.Task, error)) (task.Task, error) {
	next, err := fn(t)
	if err == nil {
		err = c.store.Update(ctx, next, t.Version)
	}
	if err != nil && !errors.Is(err, task.ErrConflict) && !errors.Is(err, task.ErrNotDue) {
		c.log.Warn("could not move task", "lambda", t.Lambda, "task_id", t.ID, "err", err)
	}
	return next, err
}

// gatesOf returns the gate mode of a lambda, the collections to hold back and those to drop.
func gatesOf(lambda string, gates []task.Gate) (mode string, held, dropped []string) {
	mode = task.GateOpen
	for _, g := range gates {
		switch {
		case g.Lambda != lambda:
		case g.Collection == "":
			mode = g.Mode
		case g.Mode == task.GateDrop:
			dropped = append(dropped, g.Collection)
			held = append(held, g.Collection)
		case g.Mode == task.GatePause:
			held = append(held, g.Collection)
		}
	}
	slices.Sort(held)
	return mode, held, dropped
}

// Recover makes every task left enqueued, claimed or processing due now. Call it at start-up
// when the queue and the executors are known to have died with the previous process (as with
// the in-memory queue of `atf dev`): the next sweep re-runs those tasks at once instead of after
// their timeouts.
func (c *Consumer) Recover(ctx context.Context) (int, error) {
	n := 0
	now := c.now().UTC()
	for _, l := range c.lambdas {
		for _, s := range []task.Status{task.StatusEnqueued, task.StatusClaimed, task.StatusProcessing} {
			cursor := ""
			for {
				tasks, next, err := c.store.List(ctx, task.ListParams{Lambda: l.Name, Status: s, Limit: task.MaxListLimit, Cursor: cursor})
				if err != nil {
					return n, err
				}
				for _, t := range tasks {
					if _, err := c.apply(ctx, t, func(t task.Task) (task.Task, error) { return task.Expire(t, now) }); err == nil {
						n++
					}
				}
				if next == "" {
					break
				}
				cursor = next
			}
		}
	}
	return n, nil
}
