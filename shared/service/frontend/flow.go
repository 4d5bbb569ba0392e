package frontend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/openatf/atf/shared/task"
)

// flowWorkers bounds the store calls a request makes at once for its upstreams.
const flowWorkers = 16

// MaxCycleReads bounds the tasks AddUpstreams reads to prove that no cycle results.
const MaxCycleReads = 10000

// linkUpstreams prepares tasks that wait for others before they are created (see task/flow.go):
// it checks that the graph has no cycle and that every upstream outside the batch exists, and
// records the edges under the upstreams. tasks in the batch that others of the batch wait for are
// marked in place, so that the create writes their marks with them. It returns the upstreams
// outside the batch, to mark once the tasks are created (markDownstream), and costs nothing for
// tasks without upstreams.
func (s *Service) linkUpstreams(ctx context.Context, tasks []task.Task) ([]task.Task, error) {
	inBatch := make(map[task.Ref]int, len(tasks))
	for i, t := range tasks {
		inBatch[t.Ref()] = i
	}
	graph := map[task.Ref][]task.Ref{}
	var outside []task.Ref
	seen := map[task.Ref]bool{}
	var edges []task.Edge
	for _, t := range tasks {
		if t.AfterCount == 0 {
			continue
		}
		graph[t.Ref()] = t.After
		edges = append(edges, t.Edges()...)
		for _, up := range t.After {
			if i, ok := inBatch[up]; ok {
				tasks[i].Downstream = true
			} else if !seen[up] {
				seen[up] = true
				outside = append(outside, up)
			}
		}
	}
	if len(edges) == 0 {
		return nil, nil
	}
	if cycle := task.FindCycle(graph); cycle != nil {
		return nil, task.Errorf(task.ErrInvalid, "after: the tasks form a cycle (each waits for the next): %s", strings.Join(cycle, " → "))
	}
	ups, err := s.store.GetMany(ctx, outside)
	if err != nil {
		return nil, err
	}
	for i, up := range ups {
		if up.ID == "" {
			return nil, task.Errorf(task.ErrInvalid, "after: upstream task %s does not exist", outside[i])
		}
	}
	if err := s.markSucceeded(ctx, ups); err != nil {
		return nil, err
	}
	if err := s.store.AddEdges(ctx, edges); err != nil {
		return nil, err
	}
	return ups, nil
}

// markSucceeded marks, before the downstream is written, the upstreams that have already
// succeeded. The mark renews an ended task against retention (it gives it a trigger and a new
// update time), so a succeeded upstream cannot be removed between the request's read and the
// downstream's check, which would end the downstream upstream_failed though its upstream
// succeeded. Marking it early takes nothing from anyone: only a failed task is redriven.
func (s *Service) markSucceeded(ctx context.Context, ups []task.Task) error {
	now := s.now().UTC()
	return parallel(ctx, len(ups), func(ctx context.Context, i int) error {
		if ups[i].Downstream || ups[i].Status != task.StatusSuccess {
			return nil
		}
		marked, err := task.ApplyState(ctx, s.store, ups[i].Lambda, ups[i].ID, func(t task.Task) (task.Task, error) {
			return task.MarkDownstream(t, now)
		})
		switch {
		case errors.Is(err, task.ErrExists):
			ups[i].Downstream = true
		case errors.Is(err, task.ErrNotFound):
			return task.Errorf(task.ErrInvalid, "after: upstream task %s does not exist", ups[i].Ref())
		case err != nil:
			return err
		default:
			ups[i] = marked
		}
		return nil
	})
}

// markDownstream marks upstreams as having downstreams, those not marked yet, once a task that
// waits for them exists: a request that fails marks nothing, so a failed upstream that no task
// waits for stays redrivable. It is best effort: the consumer's check of the downstream marks
// whatever is left unmarked before it relies on the marks (task/flow.go), so a failure here, or
// a process that dies before, only moves these writes to the check.
func (s *Service) markDownstream(ctx context.Context, ups []task.Task) {
	now := s.now().UTC()
	_ = parallel(ctx, len(ups), func(ctx context.Context, i int) error {
		if ups[i].Downstream {
			return nil
		}
		_, err := task.ApplyState(ctx, s.store, ups[i].Lambda, ups[i].ID, func(t task.Task) (task.Task, error) {
			return task.MarkDownstream(t, now)
		})
		if errors.Is(err, task.ErrExists) {
			return nil
		}
		return err
	})
}

// parallel calls fn for 0..n-1, flowWorkers at a time, and returns the first error.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	slots := make(chan struct{}, flowWorkers)
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// AddUpstreams makes a task that has not started wait for more upstreams, atomically: it is
// pending until they have ended, like a task created with them. It fails with task.ErrInvalid if
// an upstream does not exist or the new edges would close a cycle, and task.ErrConflict once the
// task has started.
func (s *Service) AddUpstreams(ctx context.Context, lambda, id string, after []task.Ref) (task.Task, error) {
	if _, err := s.Get(ctx, lambda, id); err != nil {
		return task.Task{}, err
	}
	if len(after) == 0 {
		return task.Task{}, task.Errorf(task.ErrInvalid, "after: give at least one upstream")
	}
	refs, err := task.ResolveRefs(lambda, after)
	if err != nil {
		return task.Task{}, err
	}
	down := task.Ref{Lambda: lambda, ID: id}
	ups, err := s.store.GetMany(ctx, refs)
	if err != nil {
		return task.Task{}, err
	}
	for i, up := range ups {
		if up.ID == "" {
			return task.Task{}, task.Errorf(task.ErrInvalid, "after: upstream task %s does not exist", refs[i])
		}
		if refs[i] == down {
			return task.Task{}, task.Errorf(task.ErrInvalid, "after: task %s cannot wait for itself", down)
		}
	}
	if cycle, err := s.reaches(ctx, ups, down); err != nil || cycle != nil {
		if err != nil {
			return task.Task{}, err
		}
		return task.Task{}, task.Errorf(task.ErrInvalid, "after: the new upstreams would close a cycle (each waits for the next): %s", strings.Join(cycle, " → "))
	}
	if err := s.markSucceeded(ctx, ups); err != nil {
		return task.Task{}, err
	}
	for range 5 {
		t, err := s.store.Get(ctx, lambda, id)
		if err != nil {
			return task.Task{}, err
		}
		next, err := task.AddUpstreams(t, refs, s.now().UTC())
		if err != nil {
			return task.Task{}, err
		}
		if err := s.store.AddEdges(ctx, next.Edges()[t.AfterCount:]); err != nil {
			return task.Task{}, err
		}
		switch err := s.store.AddUpstreams(ctx, next, t.Version, t.AfterCount); {
		case err == nil:
			s.notify()
			// Marked only once no cycle was found: a call that answers 422 marks nothing.
			done, err := s.breakCycle(ctx, next, refs)
			if err == nil {
				s.markDownstream(ctx, ups)
			}
			return done, err
		case !errors.Is(err, task.ErrConflict):
			return task.Task{}, err
		}
	}
	return task.Task{}, task.Errorf(task.ErrConflict, "task %s keeps changing; try again", down)
}

// breakCycle looks again, once t's new upstreams are written, for a cycle through t: another
// AddUpstreams may have written at the same time, each having checked before the other wrote.
// A task on such a cycle can never run, so it ends (upstream_failed, naming the cycle), and the
// call fails with task.ErrInvalid. Both racing calls may end their task; none is left waiting.
func (s *Service) breakCycle(ctx context.Context, t task.Task, refs []task.Ref) (task.Task, error) {
	ups, err := s.store.GetMany(ctx, refs)
	if err != nil {
		return task.Task{}, err
	}
	cycle, err := s.reaches(ctx, ups, t.Ref())
	if err != nil || cycle == nil {
		return t, err
	}
	ended, err := task.Apply(ctx, s.store, t.Lambda, t.ID, func(cur task.Task) (task.Task, error) {
		return task.EndCycle(cur, cycle, s.now().UTC())
	})
	if err != nil && !errors.Is(err, task.ErrConflict) {
		return task.Task{}, err
	}
	return ended, task.Errorf(task.ErrInvalid, "after: a concurrent change closed a cycle (each waits for the next): %s; task %s ended as upstream_failed", strings.Join(cycle, " → "), t.Ref())
}

// reaches looks for a path from down to one of ups along upstream edges, through pending tasks
// only: a task that is not pending has no upstream left to wait for, so no cycle can pass it. It
// returns the cycle the new edges would close (down, ..., the upstream, down), or nil.
func (s *Service) reaches(ctx context.Context, ups []task.Task, down task.Ref) ([]string, error) {
	from := map[task.Ref]task.Ref{} // how the walk reached a task: its downstream on the path
	var level []task.Task
	for _, u := range ups {
		from[u.Ref()] = down
		level = append(level, u)
	}
	reads := len(ups)
	for len(level) > 0 {
		var next []task.Ref
		for _, t := range level {
			if t.Status != task.StatusPending {
				continue
			}
			afters, err := s.store.Upstreams(ctx, t.Ref(), 0, t.AfterCount)
			if err != nil {
				return nil, err
			}
			for _, a := range afters {
				if a == down {
					// Walked back from t to down, then reversed: each waits for the next.
					var path []string
					for r := t.Ref(); r != down; r = from[r] {
						path = append(path, r.String())
					}
					slices.Reverse(path)
					return append(append([]string{down.String()}, path...), down.String()), nil
				}
				if _, ok := from[a]; !ok {
					from[a] = t.Ref()
					next = append(next, a)
				}
			}
		}
		if reads += len(next); reads > MaxCycleReads {
			return nil, task.Errorf(task.ErrInvalid, "after: the graph above these upstreams is over %d tasks; too large to check for cycles", MaxCycleReads)
		}
		var err error
		if level, err = s.store.GetMany(ctx, next); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// Downstreams returns a page of the tasks that wait for a task, with their status, and the cursor
// of the next page.
func (s *Service) Downstreams(ctx context.Context, lambda, id, cursor string, limit int) ([]task.Task, string, error) {
	if _, err := s.Get(ctx, lambda, id); err != nil {
		return nil, "", err
	}
	if limit < 0 || limit > task.MaxListLimit {
		return nil, "", task.Errorf(task.ErrInvalid, "limit must be in 1..%d, got %d", task.MaxListLimit, limit)
	}
	if limit == 0 {
		limit = task.DefaultListLimit
	}
	edges, next, err := s.store.Downstreams(ctx, task.Ref{Lambda: lambda, ID: id}, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	refs := make([]task.Ref, len(edges))
	for i, e := range edges {
		refs[i] = e.Down
	}
	got, err := s.store.GetMany(ctx, refs)
	if err != nil {
		return nil, "", err
	}
	out := got[:0]
	for _, t := range got {
		if t.ID != "" { // an edge whose task was never created
			out = append(out, t)
		}
	}
	return out, next, nil
}

// batchLambda is the lambda of a spec in a batch sent to lambda.
func (s *Service) batchLambda(ctx context.Context, lambda string, spec task.Spec) (task.Lambda, error) {
	if spec.Lambda != "" {
		lambda = spec.Lambda
	}
	l, err := s.lambda(ctx, lambda)
	if err != nil {
		return task.Lambda{}, fmt.Errorf("lambda: %w", err)
	}
	return l, nil
}
