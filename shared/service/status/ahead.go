package status

import (
	"context"
	"time"

	"github.com/openatf/atf/shared/task"
)

// A run that ends with a retry due within task.MaxRetryAhead (a backoff of up to a minute) goes
// back to its queue from here, in the write that records the end (task.RetryAhead): no sweep has to find it, and the enqueue costs no write of its own. A task
// that a gate holds, or any when the gates cannot be read, is left to the consumer as before.

// ahead wraps the transition fn so that a task it leaves waiting for a retry, and that no gate
// holds, is enqueued in the same write, and returns the wrapped transition and a send to call once
// the write went through, or may have (an error that is not a refusal: task.Refused): a message
// for a task that did not move only fails its claim. Without a queue it returns fn unchanged.
func (c *Controller) ahead(ctx context.Context, lambda string, fn func(task.Task) (task.Task, error)) (func(task.Task) (task.Task, error), func(context.Context)) {
	if c.queue == nil {
		return fn, func(context.Context) {}
	}
	// Apply calls wrapped one try after another, in this goroutine, and send after it returns.
	var (
		msg *task.Message
		now time.Time
	)
	wrapped := func(t task.Task) (task.Task, error) {
		next, err := fn(t)
		msg = nil // Apply may call this again, on the task as it is then
		if err != nil || next.Status != task.StatusRetriableFailure {
			return next, err
		}
		now = c.now().UTC()
		gates, gerr := c.gates.At(ctx, now)
		if gerr != nil || task.GateMode(gates, lambda, next.Collection) != task.GateOpen {
			return next, nil
		}
		enq, m, aerr := task.RetryAhead(next, now, c.cfg)
		if aerr != nil {
			return next, nil // a longer backoff: the consumer's
		}
		msg = &m
		return enq, nil
	}
	send := func(ctx context.Context) {
		if msg == nil {
			return
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
		defer cancel()
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
		defer wcancel()
		if err := task.SendOrUnsent(sctx, wctx, c.queue, c.store, []task.Message{*msg}, now, c.cfg); err != nil {
			c.log.Warn("could not send a retry to its queue; it is due again soon", "lambda", msg.Lambda, "task_id", msg.TaskID, "err", err)
		}
	}
	return wrapped, send
}

// sendTimeout bounds the send of a retry's message, and then the write that makes it due again
// if the send failed.
const sendTimeout = 5 * time.Second
