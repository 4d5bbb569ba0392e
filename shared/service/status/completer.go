package status

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Completer records the results of runs in batches, as River's completer does, for executors in
// the process of the store (atf dev): an executor hands a result over and its slot takes the next
// task at once, while one goroutine records the results handed over meanwhile together: one read
// of their tasks (GetMany) and one commit (task.UpdateMany). Each write is still conditional on
// its task's version, and each transition on the run's lease, as SetResult's.
//
// A result waits for the batch before it, never for a timer: when results come slower than a
// commit, each is recorded at once. A result lost before it was recorded (the process ended) is
// a run whose end was never written: the task runs again after its heartbeat timeout, or at the
// next start (consumer.Recover), as when SetResult's call fails.
type Completer struct {
	ctl      *Controller
	recorded func(task.Task) // told of every result written, with the task as stored

	mu     sync.RWMutex // Complete holds it to read closed and send; Close takes it to close in
	closed bool
	in     chan completion
	done   chan struct{} // closed when the last batch is recorded
}

// completion is one result handed over.
type completion struct {
	lambda, id, lease string
	r                 Result
}

const (
	// completerQueue is how many results may wait; a Complete beyond it waits for room, so a
	// store slower than the executors slows them, not the memory.
	completerQueue = 1024
	// completerBatch is the most results one batch records.
	completerBatch = 256
	// recordTimeout bounds the recording of one batch: its read, its commit and its sends.
	recordTimeout = 10 * time.Second
)

// NewCompleter starts a Completer that records results through c, and tells recorded (if not
// nil) of each task whose result it wrote. Close stops it.
func NewCompleter(c *Controller, recorded func(task.Task)) *Completer {
	if recorded == nil {
		recorded = func(task.Task) {}
	}
	k := &Completer{ctl: c, recorded: recorded, in: make(chan completion, completerQueue), done: make(chan struct{})}
	go k.run()
	return k
}

// Complete hands the result of a run under lease over, to be recorded with the others waiting.
// It returns at once, unless completerQueue results wait already. After Close it records the
// result itself, alone.
func (k *Completer) Complete(lambda, id, lease string, r Result) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.closed {
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		defer cancel()
		k.record(ctx, []completion{{lambda, id, lease, r}})
		return
	}
	k.in <- completion{lambda, id, lease, r}
}

// Close records the results handed over so far and stops. Call it before the store is closed.
func (k *Completer) Close() {
	k.mu.Lock()
	if !k.closed {
		k.closed = true
		close(k.in)
	}
	k.mu.Unlock()
	<-k.done
}

func (k *Completer) run() {
	defer close(k.done)
	for c := range k.in {
		batch := []completion{c}
	more: // whatever was handed over while the last batch was recorded
		for len(batch) < completerBatch {
			select {
			case c, ok := <-k.in:
				if !ok {
					break more
				}
				batch = append(batch, c)
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		k.record(ctx, batch)
		cancel()
	}
}

// record writes the results of batch: the transitions of the tasks as one read found them, in
// one commit. A write that meets a task changed since the read (a heartbeat that was in flight,
// a timeout, a cancel) is done again alone by SetResult, which reads afresh.
func (k *Completer) record(ctx context.Context, batch []completion) {
	c := k.ctl
	refs := make([]task.Ref, len(batch))
	for i, b := range batch {
		refs[i] = task.Ref{Lambda: b.lambda, ID: b.id}
	}
	states, err := c.store.GetMany(ctx, refs)
	if err != nil {
		c.log.Warn("could not read the tasks of a batch of results; recording each alone", "results", len(batch), "err", err)
		for _, b := range batch {
			k.recordAlone(ctx, b)
		}
		return
	}
	var (
		ws    []task.Versioned
		sends []func(context.Context)
		of    []completion
	)
	for i, b := range batch {
		t := states[i]
		if t.ID == "" {
			c.log.Warn("could not record result: the task is gone", "lambda", b.lambda, "task_id", b.id, "outcome", b.r.Outcome)
			continue
		}
		fn, err := c.resultTransition(ctx, b.lambda, b.lease, b.r)
		if err != nil {
			c.log.Warn("could not record result", "lambda", b.lambda, "task_id", b.id, "outcome", b.r.Outcome, "err", err)
			continue
		}
		fn, send := c.ahead(ctx, b.lambda, fn)
		next, err := fn(t)
		if err != nil {
			// The lease is no longer the run's (a timeout ran it again, or it was cancelled):
			// the result is refused, as SetResult would refuse it.
			c.log.Warn("could not record result", "lambda", b.lambda, "task_id", b.id, "outcome", b.r.Outcome, "err", err)
			continue
		}
		ws = append(ws, task.Versioned{Task: next, Prev: t.Version})
		sends = append(sends, send)
		of = append(of, b)
	}
	for i, err := range task.UpdateMany(ctx, c.store, ws) {
		if err == nil || !task.Refused(err) {
			// Written, or maybe (as SetResult): a retry sent ahead goes to its queue.
			sends[i](ctx)
		}
		if err == nil {
			k.recorded(ws[i].Task)
			continue
		}
		if !errors.Is(err, task.ErrConflict) {
			c.log.Warn("could not record a result in its batch; recording it alone", "lambda", of[i].lambda, "task_id", of[i].id, "err", err)
		}
		k.recordAlone(ctx, of[i])
	}
}

// recordAlone records one result through SetResult.
func (k *Completer) recordAlone(ctx context.Context, b completion) {
	t, err := k.ctl.SetResult(ctx, b.lambda, b.id, b.lease, b.r)
	if err != nil {
		k.ctl.log.Warn("could not record result", "lambda", b.lambda, "task_id", b.id, "outcome", b.r.Outcome, "err", err)
		return
	}
	k.recorded(t)
}
