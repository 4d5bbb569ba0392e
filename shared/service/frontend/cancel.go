package frontend

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/openatf/atf/shared/task"
)

// errCancelRequested ends the Apply of a cancel that finds the task's cancel already requested,
// or the task already cancelled: it changes nothing, so it writes nothing.
var errCancelRequested = errors.New("cancel already requested")

// cancel cancels one task (task.Cancel). A running task whose cancel was already requested, and a
// task already cancelled, are answered as they stand, unwritten: a cancel sent again (a client's
// retry, whose first answer was lost while the task ended) succeeds again.
func (s *Service) cancel(ctx context.Context, lambda, id string) (t task.Task, wrote bool, err error) {
	t, err = task.Apply(ctx, s.store, lambda, id, func(t task.Task) (task.Task, error) {
		if t.CancelRequested && slices.Contains(task.Running, t.Status) || t.Status == task.StatusCancelled {
			return t, errCancelRequested
		}
		return task.Cancel(t, s.now().UTC())
	})
	if errors.Is(err, errCancelRequested) {
		return t, false, nil
	}
	return t, err == nil, err
}

// MaxCancelPage is the most tasks one bulk cancel looks at: each costs a read and a write, so a
// request's cost is bounded by it, whatever the backlog.
const MaxCancelPage = 100

// CancelFilter selects the tasks of one lambda that a bulk cancel cancels, a page at a time.
type CancelFilter struct {
	Lambda     string
	Collection string      // empty: every collection
	Status     task.Status // empty: every status that can be cancelled
	Limit      int         // tasks per page, at most MaxCancelPage; zero means MaxCancelPage
	Cursor     string      // the next_cursor of the page before
}

// CancelPage is what one page of a bulk cancel did.
type CancelPage struct {
	// Cancelled counts the waiting tasks that ended cancelled.
	Cancelled int `json:"cancelled"`
	// CancelRequested counts the running tasks marked for cancellation: each ends cancelled
	// once its executor has stopped it (or at its timeout).
	CancelRequested int `json:"cancel_requested"`
	// Skipped counts the tasks of the page that had ended, or whose cancel was requested before.
	Skipped int `json:"skipped"`
	// NextCursor continues with the next page; empty after the last.
	NextCursor string `json:"next_cursor"`
}

// CancelMatching cancels one page of the tasks that f selects, in creation order: the page lists
// at most f.Limit tasks (reading at most its list budget, task.ListParams.ReadBudget, of index
// entries) and cancels each. It answers the counts and the cursor of the next page: a caller that
// wants every match goes on until the cursor is empty. A filter is required, a collection or a
// status, so that a bare request cannot cancel a whole lambda by mistake. A page that fails part
// way may be sent again with the same cursor: tasks it cancelled already are skipped.
func (s *Service) CancelMatching(ctx context.Context, f CancelFilter) (CancelPage, error) {
	if _, err := s.lambda(ctx, f.Lambda); err != nil {
		return CancelPage{}, err
	}
	switch {
	case f.Collection == "" && f.Status == "":
		return CancelPage{}, task.Errorf(task.ErrInvalid, "a bulk cancel needs a collection or a status to select its tasks")
	case f.Status != "" && !slices.Contains(task.Waiting, f.Status) && !slices.Contains(task.Running, f.Status):
		return CancelPage{}, task.Errorf(task.ErrInvalid, "status %q cannot be cancelled: only waiting and running tasks can", task.Echo(string(f.Status)))
	case f.Limit < 0 || f.Limit > MaxCancelPage:
		return CancelPage{}, task.Errorf(task.ErrInvalid, "limit must be in 1..%d, got %d", MaxCancelPage, f.Limit)
	}
	if f.Collection != "" {
		if err := task.ValidateID("collection", f.Collection); err != nil {
			return CancelPage{}, err
		}
	}
	tasks, next, err := s.store.List(ctx, task.ListParams{
		Lambda: f.Lambda, Collection: f.Collection, Status: f.Status, Limit: cmp.Or(f.Limit, MaxCancelPage), Cursor: f.Cursor,
	})
	if err != nil {
		return CancelPage{}, err
	}
	page := CancelPage{NextCursor: next}
	// The page's moves are counted summed, one counter write per item they touch.
	ctx, flush := task.GatherCounts(ctx, s.store)
	defer flush()
	for _, t := range tasks {
		if t.Status.Terminal() || t.CancelRequested {
			page.Skipped++
			continue
		}
		after, wrote, err := s.cancel(ctx, f.Lambda, t.ID)
		switch {
		case errors.Is(err, task.ErrConflict), errors.Is(err, task.ErrNotFound):
			page.Skipped++ // it ended meanwhile, or is gone
		case err != nil:
			return CancelPage{}, err
		case !wrote:
			page.Skipped++ // its cancel was requested by another caller meanwhile
		case after.Status == task.StatusCancelled:
			page.Cancelled++
		default:
			page.CancelRequested++
		}
	}
	return page, nil
}
