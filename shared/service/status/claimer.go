package status

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Claimer claims tasks in batches for executors in the process of the store (atf dev): the
// claims made while a batch is being written (a controller claims the messages of one receive at
// once) are the next batch, and one read of their tasks (task.GetBatch) and one commit
// (task.UpdateMany) serve them all. Each claim is the one Claim would make: the same gate check,
// lease and transition, written conditionally on the version read; a claim whose write meets a
// task changed since the read is made again alone by Claim, which reads afresh.
//
// A claim waits for a batch in hand to end (claimBatches), never for a timer: claims made one at a
// time are each written at once.
type Claimer struct {
	ctl *Controller

	mu     sync.RWMutex // Claim holds it to read closed and send; Close takes it to close in
	closed bool
	in     chan *claimCall
	runs   sync.WaitGroup
	early  sync.WaitGroup // the claims of messages that came before their task (Controller.claimEarly)
}

// claimCall is one Claim waiting for its batch.
type claimCall struct {
	ctx                  context.Context
	lambda, id, delivery string
	token                string
	answer               chan claimAnswer // room for the one answer: the batch never waits
}

type claimAnswer struct {
	t   task.Task
	err error
}

// claimTimeout bounds a batch of claims whose caller set no deadline of its own.
const claimTimeout = 10 * time.Second

// claimBatch is the most claims one batch makes.
const claimBatch = 256

// claimBatches is how many batches may be in hand at once: one gathers and reads its tasks while
// the one before is committed, so that the slots never wait for a whole commit and a read in turn.
const claimBatches = 2

// NewClaimer starts a Claimer that claims through c. Close stops it.
func NewClaimer(c *Controller) *Claimer {
	k := &Claimer{ctl: c, in: make(chan *claimCall)}
	for range claimBatches {
		k.runs.Go(k.run)
	}
	return k
}

// Claim claims like Controller.Claim, with the claims made meanwhile. After Close it claims alone.
func (k *Claimer) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	call := &claimCall{ctx: ctx, lambda: lambda, id: id, delivery: delivery, token: token, answer: make(chan claimAnswer, 1)}
	k.mu.RLock()
	if k.closed {
		k.mu.RUnlock()
		return k.ctl.Claim(ctx, lambda, id, delivery, token)
	}
	select {
	case k.in <- call:
		k.mu.RUnlock()
	case <-ctx.Done():
		k.mu.RUnlock()
		return task.Task{}, unwritten(ctx.Err()) // no batch has it
	}
	select {
	case a := <-call.answer:
		return a.t, a.err
	case <-ctx.Done():
		// As with a call cut short: the claim may be written. The executor hands it back
		// (executor.Executor.Claim, Controller.Unclaim).
		return task.Task{}, ctx.Err()
	}
}

// Close stops the Claimer once the batch in hand is answered.
func (k *Claimer) Close() {
	k.mu.Lock()
	if !k.closed {
		k.closed = true
		close(k.in)
	}
	k.mu.Unlock()
	k.runs.Wait()
	k.early.Wait()
}

func (k *Claimer) run() {
	for call := range k.in {
		batch := []*claimCall{call}
	more: // the claims made while the last batch was written
		for len(batch) < claimBatch {
			select {
			case call, ok := <-k.in:
				if !ok {
					break more
				}
				batch = append(batch, call)
			default:
				break more
			}
		}
		k.claim(batch)
	}
}

// claim makes the claims of batch and answers each. The batch's read and write run on no
// caller's context, so that one caller giving up fails no other claim; each is bounded by the
// deadline of the batch's latest caller.
func (k *Claimer) claim(batch []*claimCall) {
	c := k.ctl
	ctx, cancel := batchContext(batch)
	defer cancel()
	now := c.now().UTC()
	gates, err := c.gates.At(ctx, now)
	if err != nil {
		for _, call := range batch {
			call.answer <- claimAnswer{err: unwritten(err)}
		}
		return
	}
	// The tasks whose messages carry them as their senders wrote them (status.WithState) are
	// not read: a claim's write is conditional on the version it starts from, and one that moved
	// since is claimed alone below, from a read.
	found := make([]task.Task, len(batch))
	var (
		refs   []task.Ref
		unread []int
	)
	for i, call := range batch {
		if st := StateOf(call.ctx, call.lambda, call.id); st != nil {
			found[i] = *st
			continue
		}
		refs = append(refs, task.Ref{Lambda: call.lambda, ID: call.id})
		unread = append(unread, i)
	}
	if len(refs) > 0 {
		var read []task.Task
		read, err = task.GetBatch(ctx, c.store, refs)
		for j, i := range unread[:len(read)] {
			found[i] = read[j]
		}
	}
	if err != nil {
		for _, call := range batch {
			call.answer <- claimAnswer{err: unwritten(err)}
		}
		return
	}
	var (
		ws    []task.Versioned
		calls []*claimCall
		cls   []*claimOf
	)
	for i, call := range batch {
		t := found[i]
		if err := call.ctx.Err(); err != nil {
			call.answer <- claimAnswer{err: err} // its caller is gone: no claim for it
			continue
		}
		if t.ID == "" {
			// Perhaps sent before its create: Claim waits for it, and then buries its nonce,
			// apart from the batch, which does not wait.
			k.early.Go(func() {
				a := claimAnswer{}
				a.t, a.err = c.Claim(call.ctx, call.lambda, call.id, call.delivery, call.token)
				call.answer <- a
			})
			continue
		}
		cl := c.claim(call.ctx, gates, call.lambda, call.id, call.delivery, call.token, now)
		if cl.limits, err = c.limitsOf(ctx, call.lambda); err != nil {
			call.answer <- claimAnswer{err: unwritten(err)}
			continue
		}
		next, err := cl.transition(t)
		if err != nil {
			a := claimAnswer{}
			a.t, a.err = c.claimed(call.ctx, cl, t, err)
			call.answer <- a
			continue
		}
		ws = append(ws, task.Versioned{Task: next, Prev: t.Version})
		calls = append(calls, call)
		cls = append(cls, cl)
	}
	// A caller may have given up while the batch waited for the one before: make no claim for it.
	kept := 0
	for i, call := range calls {
		if err := call.ctx.Err(); err != nil {
			call.answer <- claimAnswer{err: err}
			continue
		}
		ws[kept], calls[kept], cls[kept] = ws[i], call, cls[i]
		kept++
	}
	ws, calls, cls = ws[:kept], calls[:kept], cls[:kept]
	for i, err := range task.UpdateMany(ctx, c.store, ws) {
		call, a := calls[i], claimAnswer{}
		if errors.Is(err, task.ErrConflict) {
			// Changed since the read (a duplicate message's claim, a timeout): claim alone.
			a.t, a.err = c.Claim(call.ctx, call.lambda, call.id, call.delivery, call.token)
		} else {
			a.t, a.err = c.claimed(call.ctx, cls[i], ws[i].Task, err)
		}
		call.answer <- a
	}
}

// batchContext is a context without cancellation whose deadline is the latest of the batch's
// callers', or claimTimeout from now if one has none.
func batchContext(batch []*claimCall) (context.Context, context.CancelFunc) {
	var latest context.Context
	for _, call := range batch {
		d, ok := call.ctx.Deadline()
		if !ok {
			return context.WithTimeout(context.WithoutCancel(call.ctx), claimTimeout)
		}
		if latest == nil {
			latest = call.ctx
		} else if ld, _ := latest.Deadline(); d.After(ld) {
			latest = call.ctx
		}
	}
	d, _ := latest.Deadline()
	return context.WithDeadline(context.WithoutCancel(latest), d)
}
