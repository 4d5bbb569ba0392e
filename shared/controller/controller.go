// Package controller runs one lambda's tasks on one machine: it takes messages from the
// lambda's queues in strict priority order, claims each task, and hands it to an executor slot.
// It never holds more messages than it has free slots, so a high-priority task that arrives
// while the slots are busy still starts before any lower one already waiting.
package controller

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/openatf/atf/shared/executor"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// Defaults of Config.
const (
	// DefaultIdleWait is how long the controller long-polls its highest priority queue when all
	// its queues are empty.
	DefaultIdleWait = 20 * time.Millisecond
	// DefaultVisibility hides a received message until its claim is settled; an unsettled one
	// (the claim call failed) comes back after it.
	DefaultVisibility = 30 * time.Second
)

// Config configures a Controller.
type Config struct {
	Lambda     task.Lambda // with defaults applied; Concurrency is the number of slots
	Handler    worker.Handler
	Queue      task.Queue
	Status     executor.Status
	Executor   *executor.Executor
	IdleWait   time.Duration // DefaultIdleWait if zero
	Visibility time.Duration // DefaultVisibility if zero
	Logger     *slog.Logger
}

// Controller feeds one lambda's executors.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	slots chan struct{}

	stopOnce  sync.Once
	stopRecv  context.CancelFunc // stops taking new messages
	stopTasks context.CancelFunc // stops running handlers, which release their tasks
	running   sync.WaitGroup     // in-flight tasks
	loopDone  chan struct{}
}

// Start starts the controller; Stop ends it.
func Start(c Config) *Controller {
	if c.IdleWait <= 0 {
		c.IdleWait = DefaultIdleWait
	}
	if c.Visibility <= 0 {
		c.Visibility = DefaultVisibility
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	recvCtx, stopRecv := context.WithCancel(context.Background())
	taskCtx, stopTasks := context.WithCancel(context.Background())
	ctl := &Controller{
		cfg: c, log: c.Logger.With("lambda", c.Lambda.Name),
		slots:    make(chan struct{}, c.Lambda.Concurrency),
		stopRecv: stopRecv, stopTasks: stopTasks, loopDone: make(chan struct{}),
	}
	go ctl.loop(recvCtx, taskCtx)
	return ctl
}

// Stop stops taking tasks and waits for the running ones to finish until ctx is done; then it
// stops their handlers, and their tasks are released for another run. A second Stop is a no-op.
func (c *Controller) Stop(ctx context.Context) {
	c.stopOnce.Do(func() {
		c.stopRecv()
		<-c.loopDone
		finished := make(chan struct{})
		go func() { c.running.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-ctx.Done():
			c.stopTasks()
			<-finished
		}
		c.stopTasks()
	})
}

func (c *Controller) loop(recvCtx, taskCtx context.Context) {
	defer close(c.loopDone)
	for {
		select {
		case c.slots <- struct{}{}:
		case <-recvCtx.Done():
			return
		}
		d, ok := c.next(recvCtx)
		if !ok {
			<-c.slots
			return
		}
		c.running.Add(1)
		go func() {
			defer func() { <-c.slots; c.running.Done() }()
			c.run(taskCtx, d)
		}()
	}
}

// next returns the first message of the highest priority queue that has one. When a pass over
// all of them finds nothing, the next pass long-polls the highest priority for IdleWait instead
// of sleeping: a high-priority task then starts the moment it arrives, and an idle controller on
// SQS makes a few requests a second rather than a busy loop. It reports false when ctx ends.
func (c *Controller) next(ctx context.Context) (task.Delivery, bool) {
	var wait time.Duration
	for {
		for i, p := range c.cfg.Lambda.Priorities {
			params := task.ReceiveParams{Lambda: c.cfg.Lambda.Name, Priority: p, Max: 1, Visibility: c.cfg.Visibility}
			if i == 0 {
				params.Wait = wait
			}
			ds, err := c.cfg.Queue.Receive(ctx, params)
			if err != nil && ctx.Err() == nil {
				c.log.Warn("receive failed", "priority", p, "err", err)
				// Don't hammer a queue that fails: rest before the next pass.
				if !sleep(ctx, c.cfg.IdleWait) {
					return task.Delivery{}, false
				}
			}
			if len(ds) > 0 {
				return ds[0], true
			}
			if ctx.Err() != nil {
				return task.Delivery{}, false
			}
		}
		wait = c.cfg.IdleWait
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// run claims the task of d and runs it. The message is deleted once the claim is settled either
// way: from then on the store's timeouts, not the queue, keep the task alive.
func (c *Controller) run(ctx context.Context, d task.Delivery) {
	t, err := c.cfg.Status.Claim(ctx, d.Lambda, d.TaskID)
	switch {
	case err == nil:
	case errors.Is(err, task.ErrConflict), errors.Is(err, task.ErrNotFound):
		// A duplicate message, or the task was finished, cancelled or dropped meanwhile.
		c.log.Debug("message discarded", "task_id", d.TaskID, "reason", err)
	default:
		c.log.Warn("claim failed; the message will come back", "task_id", d.TaskID, "err", err)
		return
	}
	if err := c.cfg.Queue.Delete(context.WithoutCancel(ctx), d); err != nil {
		c.log.Warn("delete message failed", "task_id", d.TaskID, "err", err)
	}
	if t.Lease != "" {
		c.cfg.Executor.Run(ctx, c.cfg.Lambda, c.cfg.Handler, t)
	}
}
