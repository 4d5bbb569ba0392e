package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Task flows (see task/flow.go): a pass checks the lambda's new pending tasks against their
// upstreams, and tells the downstreams of its ended tasks. Both run whatever the gates, like
// timeouts: a gate holds tasks back from running, not from learning that their upstreams ended.

const (
	// edgesPerTell is how many edges a pass reads of one ended task at a time.
	edgesPerTell = 500
	// upstreamsPerRead is how many upstreams a check reads at a time.
	upstreamsPerRead = 1000
	// flowWriters bounds the settle writes a pass has in flight.
	flowWriters = 16
)

// flows runs the lambda's checks, then tells the downstreams of its ended tasks, and goes on with
// the downstreams that this ended in turn (upstream_failed), of whatever lambda, until none is
// left or the pass runs out of time: a failure reaches the end of a chain within the pass.
func (c *passState) flows(ctx context.Context, l task.Lambda, now time.Time) error {
	// One read for both: on DynamoDB they share a lane (docs/data-model.md).
	due, err := c.store.Due(ctx, task.DueParams{Lambda: l.Name, Statuses: flowing, Before: now, Limit: c.cfg.EnqueueQuota})
	if err != nil {
		return err
	}
	c.st.Seen += len(due)
	var ended []task.Task
	for _, t := range due {
		if t.Status != task.StatusPending {
			ended = append(ended, t)
		} else if err := c.check(ctx, t, now); err != nil {
			return err
		}
	}
	for round := 0; err == nil && len(ended) > 0 && round < maxTellRounds; round++ {
		ended, err = c.tell(ctx, ended, now)
	}
	return err
}

// flowing are the statuses of the tasks a pass looks at for flows: pending ones due for their
// check, and ended ones with downstreams to tell.
var flowing = append([]task.Status{task.StatusPending}, task.Ended...)

// maxTellRounds bounds the rounds of telling in one pass; the pass's deadline bounds them too.
const maxTellRounds = 1000

// check settles the upstreams of a new pending task that have already ended, and clears its
// check trigger: an upstream that ends later tells the task itself, as the check made sure that
// every upstream is marked (markUpstreams).
func (c *passState) check(ctx context.Context, t task.Task, now time.Time) error {
	var ups []task.Settled
	for from := 0; from < t.AfterCount; from += upstreamsPerRead {
		refs, err := c.store.Upstreams(ctx, t.Ref(), from, upstreamsPerRead)
		if err != nil {
			return err
		}
		got, err := c.store.GetMany(ctx, refs)
		if err != nil {
			return err
		}
		if err := c.markUpstreams(ctx, got, now); err != nil {
			// The task stays due and is checked again; a mark that fails (an upstream that keeps
			// changing, or a write of another lambda's task refused) stops this check, not the pass.
			if !errors.Is(err, task.ErrConflict) {
				c.log.Warn("could not mark a pending task's upstreams; it is checked again when next due", "lambda", t.Lambda, "task_id", t.ID, "err", err)
			}
			return nil
		}
		for i, u := range got {
			switch {
			case u.ID == "":
				// It existed when the task was scheduled: the store's retention has removed it
				// since. Its end is unknown and will never come.
				ups = append(ups, task.Settled{Index: from + i, Up: refs[i], Gone: true})
			case u.Status.Terminal():
				ups = append(ups, task.Settled{Index: from + i, Up: refs[i], Status: u.Status})
			}
		}
	}
	next, err := c.apply(ctx, t, func(t task.Task) (task.Task, error) {
		next, err := task.Settle(t, ups, now)
		switch {
		case errors.Is(err, task.ErrNotDue):
			next = t
		case err != nil:
			return t, err
		}
		if next.Status == task.StatusPending {
			return task.Checked(next, now)
		}
		return next, nil
	})
	if err == nil {
		c.count(next)
	}
	return nil // a conflict or a stale entry: the task is checked when next due
}

// markUpstreams marks the upstreams a check read that are not marked yet: the frontend marks
// them only once their downstream exists, and may have died before it did (task/flow.go). Each
// one marked is replaced by its state as marked, which the check settles from, never from the
// read before: a redrive in between may have given a failed upstream a second life, which is
// what the downstream must wait for. One that no longer exists is left to count as gone.
func (c *passState) markUpstreams(ctx context.Context, ups []task.Task, now time.Time) error {
	var unmarked []int
	for i, u := range ups {
		if u.ID != "" && !u.Downstream {
			unmarked = append(unmarked, i)
		}
	}
	var (
		mu    sync.Mutex
		first error
	)
	err := each(ctx, len(unmarked), func(ctx context.Context, j int) {
		i := unmarked[j]
		marked, err := task.ApplyState(ctx, c.store, ups[i].Lambda, ups[i].ID, func(t task.Task) (task.Task, error) {
			return task.MarkDownstream(t, now)
		})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil, errors.Is(err, task.ErrExists): // marked, by this or another writer
			ups[i] = marked
		case errors.Is(err, task.ErrNotFound):
			ups[i] = task.Task{}
		case first == nil:
			first = err
		}
	})
	if first != nil {
		return first
	}
	return err
}

// tell settles, for each ended task, the downstreams on its next page of edges, then records how
// far it got. Edges into one task from several ended tasks are settled in one write. It returns
// the downstreams it ended that have downstreams of their own to tell.
func (c *passState) tell(ctx context.Context, ended []task.Task, now time.Time) ([]task.Task, error) {
	type page struct{ next string }
	pages := make([]page, len(ended))
	byDown := map[task.Ref][]task.Settled{}
	var order []task.Ref
	for i, u := range ended {
		edges, next, err := c.store.Downstreams(ctx, u.Ref(), u.NotifyCursor, edgesPerTell)
		if err != nil {
			return nil, err
		}
		pages[i].next = next
		for _, e := range edges {
			if _, ok := byDown[e.Down]; !ok {
				order = append(order, e.Down)
			}
			byDown[e.Down] = append(byDown[e.Down], task.Settled{Index: e.Index, Up: u.Ref(), Status: u.Status})
		}
	}
	failed := make(map[task.Ref]bool)
	var (
		mu   sync.Mutex
		more []task.Task // the downstreams this ended, with downstreams of their own
	)
	err := each(ctx, len(order), func(ctx context.Context, i int) {
		down := order[i]
		t, err := c.settle(ctx, down, byDown[down], now)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			for _, s := range byDown[down] {
				failed[s.Up] = true
			}
		} else if t.Status.Terminal() && t.NextTriggerAt != nil {
			more = append(more, t)
		}
	})
	if err != nil {
		return nil, err
	}
	for i, u := range ended {
		if failed[u.Ref()] {
			continue // told again from the same cursor at the next pass
		}
		told, err := c.apply(ctx, u, func(t task.Task) (task.Task, error) {
			return task.Notified(t, pages[i].next, pages[i].next == "", now)
		})
		if err == nil && told.NextTriggerAt != nil {
			more = append(more, told) // more edges to go
		}
	}
	return more, nil
}

// settle records upstreams' ends on one downstream task, and returns it as written (a zero Task
// if nothing was). An edge is believed only if the task
// names that upstream at that index (an edge can outlive a create that failed, or an
// AddUpstreams that lost a race). A task that is missing (its create failed, or is still under
// way: its check will see the upstream) or no longer pending needs nothing.
func (c *passState) settle(ctx context.Context, down task.Ref, ups []task.Settled, now time.Time) (task.Task, error) {
	valid := ups[:0:0]
	for _, s := range ups {
		at, err := c.store.Upstreams(ctx, down, s.Index, 1)
		if errors.Is(err, task.ErrNotFound) || errors.Is(err, task.ErrConflict) {
			// No such task (an edge of a create that failed), or its list was being replaced:
			// the AddUpstreams that replaced it made the task due for a check, which reads
			// every upstream. Either way, nothing for this edge to do.
			continue
		}
		if err != nil {
			return task.Task{}, err
		}
		if len(at) == 1 && at[0] == s.Up {
			valid = append(valid, s)
		}
	}
	if len(valid) == 0 {
		return task.Task{}, nil
	}
	for range 5 {
		got, err := c.store.GetMany(ctx, []task.Ref{down})
		if err != nil {
			return task.Task{}, err
		}
		t := got[0]
		if t.ID == "" {
			return task.Task{}, nil
		}
		next, err := task.Settle(t, valid, now)
		if err != nil {
			return task.Task{}, nil // not pending, or nothing new to settle
		}
		switch err := c.store.Update(ctx, next, t.Version); {
		case err == nil:
			c.count(next)
			return next, nil
		case !errors.Is(err, task.ErrConflict):
			return task.Task{}, err
		}
	}
	return task.Task{}, task.Errorf(task.ErrConflict, "task %s keeps changing", down)
}

// count adds a flow transition's outcome to the pass's stats.
func (c *passState) count(t task.Task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch t.Status {
	case task.StatusNew:
		c.st.Unblocked++
	case task.StatusUpstreamFailed:
		c.st.UpstreamFailed++
	}
}

// each calls fn for 0..n-1, flowWriters at a time, until ctx ends.
func each(ctx context.Context, n int, fn func(ctx context.Context, i int)) error {
	var wg sync.WaitGroup
	slots := make(chan struct{}, flowWriters)
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-slots }()
			fn(ctx, i)
		})
	}
	wg.Wait()
	return nil
}
