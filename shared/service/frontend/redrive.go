package frontend

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/openatf/atf/shared/task"
)

// Redrive: a task that failed for good (dead or fatal_failure) runs again, with a fresh attempt
// budget and optionally a new payload, priority or max_attempts (task.Redrive). One task at a
// time, or a page of a filtered list per request (RedriveMatching), so that a request's reads
// and writes are bounded by its page, never by the backlog of dead tasks.

// ListFailed returns a page of the tasks of every registered lambda that failed for good (the
// dead letters, which a redrive takes), latest updated first. It reads about as much as the page
// holds, however many lambdas and tasks there are (task.RedriveStore.ListFailed). The tasks of a
// lambda no longer registered are left out, as the API answers 404 for everything about it: a
// page may then be short, with its cursor.
func (s *Service) ListFailed(ctx context.Context, p task.FailedParams) ([]task.Task, string, error) {
	if err := p.Validate(); err != nil {
		return nil, "", err
	}
	tasks, next, err := s.store.ListFailed(ctx, p)
	if err != nil {
		return nil, "", err
	}
	lambdas, err := s.lambdas.Lambdas(ctx)
	if err != nil {
		return nil, "", err
	}
	tasks = slices.DeleteFunc(tasks, func(t task.Task) bool {
		return !slices.ContainsFunc(lambdas, func(l task.Lambda) bool { return l.Name == t.Lambda })
	})
	return tasks, next, nil
}

// Redrive gives one dead or fatally failed task a second life. A task sent ahead of the sweep
// when the schedule path would send it (ahead.go): it runs at once.
func (s *Service) Redrive(ctx context.Context, lambda, id string, o task.RedriveOptions) (task.Task, error) {
	l, err := s.lambda(ctx, lambda)
	if err != nil {
		return task.Task{}, err
	}
	if err := o.Check(l, s.cfg); err != nil {
		return task.Task{}, err
	}
	if err := task.ValidateID("task id", id); err != nil {
		return task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", task.Echo(id), lambda)
	}
	t, err := s.redrive(ctx, lambda, id, o)
	if errors.Is(err, task.ErrNotFound) {
		return task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", task.Echo(id), lambda)
	}
	if err == nil && t.Status == task.StatusNew { // not sent ahead: the consumer's next sweep sends it
		s.notify()
	}
	return t, err
}

// redrive reads the task whole (its payload and upstreams go with it into its second life),
// redrives it and writes it, again from a fresh read if another writer got there first. A refusal
// that a fresh read does not change (a payload the store lost) ends it.
func (s *Service) redrive(ctx context.Context, lambda, id string, o task.RedriveOptions) (task.Task, error) {
	var failed int64 = -1
	for range 5 {
		t, err := s.store.Get(ctx, lambda, id)
		if err != nil {
			return task.Task{}, err
		}
		now := s.now().UTC()
		next, err := task.Redrive(t, o, now, s.cfg)
		if err != nil {
			return t, err
		}
		one := []task.Task{next}
		msgs := s.enqueueAhead(ctx, one, now)
		err = s.store.Redrive(ctx, one[0], t.Version)
		switch {
		case err == nil:
			s.send(ctx, msgs, now)
			return one[0], nil
		case !errors.Is(err, task.ErrConflict) || t.Version == failed:
			return t, err
		}
		failed = t.Version
	}
	return task.Task{}, task.Errorf(task.ErrConflict, "task %s/%s keeps changing; try again", lambda, id)
}

// RedriveMatching redrives the failed tasks of one page of p: p lists dead and fatal_failure
// tasks (both unless p names one of them), of a collection and a creation-time range if given.
// It answers how many it redrove and skipped (with why), and the page's cursor: the caller goes
// on with it until it is empty. The request reads what a page of the list reads, within its
// budget (task.ListParams.ReadBudget), and redrives at most a page of tasks, task.MaxRedriveLimit
// (its default), a few at a time.
//
// A redriven task leaves the failed statuses, so a caller that starts again from the first page
// finds only the tasks still failed: those skipped, and those that failed since.
func (s *Service) RedriveMatching(ctx context.Context, p task.ListParams, o task.RedriveOptions) (task.RedriveResult, error) {
	l, err := s.lambda(ctx, p.Lambda)
	if err != nil {
		return task.RedriveResult{}, err
	}
	if err := o.Check(l, s.cfg); err != nil {
		return task.RedriveResult{}, err
	}
	set := p.StatusSet()
	for _, st := range set {
		if !slices.Contains(task.Failed, st) {
			return task.RedriveResult{}, task.Errorf(task.ErrInvalid, "status %q: a redrive takes tasks that are %s or %s", task.Echo(string(st)), task.StatusDead, task.StatusFatalFailure)
		}
	}
	if len(set) == 0 {
		p.Status, p.Statuses = "", task.Failed
	}
	if p.Limit < 0 || p.Limit > task.MaxRedriveLimit {
		return task.RedriveResult{}, task.Errorf(task.ErrInvalid, "limit must be in 1..%d, got %d", task.MaxRedriveLimit, p.Limit)
	}
	if p.Limit == 0 {
		p.Limit = task.MaxRedriveLimit
	}
	tasks, next, err := s.List(ctx, p)
	if err != nil {
		return task.RedriveResult{}, err
	}
	errs := make([]error, len(tasks))
	left := make([]bool, len(tasks)) // redriven, and left to the consumer's sweep
	slots := make(chan struct{}, redriveWorkers)
	// The page's moves are counted summed, one counter write per item they touch.
	gathered, flush := task.GatherCounts(ctx, s.store)
	var wg sync.WaitGroup
	for i, t := range tasks {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			var next task.Task
			next, errs[i] = s.redrive(gathered, t.Lambda, t.ID, o)
			left[i] = errs[i] == nil && next.Status == task.StatusNew
		})
	}
	wg.Wait()
	flush()
	if slices.Contains(left, true) {
		s.notify()
	}
	r := task.RedriveResult{Next: next}
	var failed []error
	for i, err := range errs {
		switch {
		case err == nil:
			r.Redriven++
		case errors.Is(err, task.ErrConflict), errors.Is(err, task.ErrNotFound), errors.Is(err, task.ErrTooLarge):
			// The task's own business (downstreams, a deadline, a lost payload, a status that
			// moved): the others go on.
			r.Skipped++
			r.Skips = append(r.Skips, task.RedriveSkip{ID: tasks[i].ID, Reason: err.Error()})
		default:
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		// The store failed: what was redriven stays so; the caller sends the request again, and
		// the page's redriven tasks are no longer listed.
		return r, failed[0]
	}
	return r, nil
}

// redriveWorkers is how many tasks of a page a redrive by filter redrives at once.
const redriveWorkers = 8
