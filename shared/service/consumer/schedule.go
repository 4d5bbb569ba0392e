package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Periodic schedules (task/schedule.go): each pass of a lambda fires its schedules that are due,
// whatever its gates (a gate holds or drops the tasks they create, as any other), before it reads
// the waiting tasks, so that a task due now is enqueued by the same pass.
//
// A firing creates its task (id task.FireID) through the Scheduler, then the schedule moves on
// with a write conditional on its version. Two consumers that read the same version both try the
// create, and the store lets one in (the task id is taken: task.ErrExists, or the frontend's
// replay); both try the advance, and one wins. A crash between the two leaves the schedule due:
// the next pass finds the task there and advances. So a firing makes one task however often it
// is seen (docs/guarantees.md, "One task per firing").

// MaxSchedulesPerPass bounds the due schedules one pass of a lambda reads and fires; a pass that
// found this many is followed by another at once.
const MaxSchedulesPerPass = 100

// Scheduler creates a firing's task as the API does: frontend.Service, whose schedule path sends
// a task due within 15 minutes to its queue itself (delayed to its run time). It is idempotent on
// the task id: a replay of the same request answers created false.
type Scheduler interface {
	Schedule(ctx context.Context, lambda string, spec task.Spec) (task.Task, bool, error)
}

// storeScheduler creates tasks straight in the store, new, for the sweep to enqueue: the
// consumer's Scheduler when its Config names none.
type storeScheduler struct {
	c *Consumer
}

func (s storeScheduler) Schedule(ctx context.Context, lambda string, spec task.Spec) (task.Task, bool, error) {
	l := s.c.lambdas[s.c.byName[lambda]]
	t, err := task.New(spec, l, s.c.now().UTC(), s.c.cfg)
	if err != nil {
		return task.Task{}, false, err
	}
	switch err := s.c.store.Create(ctx, t); {
	case errors.Is(err, task.ErrExists):
		return t, false, nil
	case err != nil:
		return task.Task{}, false, err
	}
	return t, true, nil
}

// scheduleLead is how far ahead of its time a pass fires a schedule: with a Scheduler that sends
// a task ahead to its queue, delayed to its run time, a firing then runs on time rather than up to
// a poll interval late; without one, a task made early would wait for a later pass, so none.
func (c *Consumer) scheduleLead() time.Duration {
	if c.sendsAhead {
		return c.cfg.PollInterval
	}
	return 0
}

// fireSchedules fires the lambda's due schedules.
func (c *passState) fireSchedules(ctx context.Context, l task.Lambda, now time.Time) error {
	horizon := now.Add(c.scheduleLead())
	due, err := c.store.DueSchedules(ctx, l.Name, horizon, MaxSchedulesPerPass)
	if err != nil {
		return err
	}
	c.st.Seen += len(due)
	c.st.Full = c.st.Full || len(due) == MaxSchedulesPerPass
	slots := make(chan struct{}, scheduleWriters)
	var wg sync.WaitGroup
	for _, sc := range due {
		if ctx.Err() != nil {
			break
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			c.fire(ctx, sc, now, horizon)
		})
	}
	wg.Wait()
	return ctx.Err()
}

// scheduleWriters is how many schedules a pass fires at once: each firing is a create and an
// advance, round trips that one at a time would hold a pass of 100 due schedules for seconds on
// DynamoDB.
const scheduleWriters = 16

// countFirings adds to the pass's firing stats, which schedules fired in parallel share.
func (c *passState) countFirings(fired, skipped int) {
	c.mu.Lock()
	c.st.Fired += fired
	c.st.FiringsSkipped += skipped
	c.mu.Unlock()
}

// fire makes the firings of one schedule due by horizon, then advances it. A firing whose create
// failed (the store, not the request) stops it there: the schedule advances to that firing, which
// the next pass makes again.
func (c *passState) fire(ctx context.Context, sc task.Schedule, now, horizon time.Time) {
	log := c.log.With("lambda", sc.Lambda, "schedule", sc.ID)
	fires, next, err := sc.Firings(now, horizon)
	if err != nil {
		log.Error("schedule cannot compute its fire times", "err", err)
		return
	}
	last := sc.LastFire
	for _, at := range fires {
		if sc.Overlap == task.OverlapSkip && last != nil && c.running(ctx, sc, *last) {
			c.countFirings(0, 1)
			continue
		}
		_, created, err := c.scheduler.Schedule(ctx, sc.Lambda, sc.TaskSpec(at))
		switch {
		case err == nil:
			if created {
				c.countFirings(1, 0)
			}
		case errors.Is(err, task.ErrConflict):
			// A task with the firing's id exists from another request: the firing was made.
			log.Warn("a firing's task id is taken by another task", "task_id", task.FireID(sc.ID, at))
		case errors.Is(err, task.ErrInvalid), errors.Is(err, task.ErrNotFound), errors.Is(err, task.ErrTooLarge):
			// The template no longer makes a task (a priority or the lambda gone): this firing
			// cannot be made, now or later.
			log.Error("a firing's task is refused; the firing is skipped", "task_id", task.FireID(sc.ID, at), "err", err)
			c.countFirings(0, 1)
			continue
		default:
			log.Warn("could not create a firing's task; the next pass makes it again", "task_id", task.FireID(sc.ID, at), "err", err)
			if at.Equal(sc.NextFire) && last == sc.LastFire {
				return // nothing made: nothing to write
			}
			next = at
			c.advance(ctx, sc, last, next, now)
			return
		}
		last = &at
	}
	c.advance(ctx, sc, last, next, now)
}

// advance moves the schedule to its next firing, if no one else moved it since it was read.
func (c *passState) advance(ctx context.Context, sc task.Schedule, last *time.Time, next, now time.Time) {
	err := c.store.UpdateSchedule(ctx, task.Fire(sc, last, next, now), sc.Version)
	if err != nil && !errors.Is(err, task.ErrConflict) {
		c.log.Warn("could not advance a schedule; the next pass finds its firings made", "lambda", sc.Lambda, "schedule", sc.ID, "err", err)
	}
}

// running reports whether the task of the firing at has not ended (overlap skip). A task that
// is gone (retention removed it) has ended; so has one whose read fails: a firing made twice in
// parallel is what allow does, a firing lost for a read error is worse.
func (c *passState) running(ctx context.Context, sc task.Schedule, at time.Time) bool {
	id := task.FireID(sc.ID, at)
	read := c.store.Get
	if r, ok := c.store.(task.StateReader); ok {
		read = r.GetState
	}
	t, err := read(ctx, sc.Lambda, id)
	if err != nil {
		if !errors.Is(err, task.ErrNotFound) {
			c.log.Warn("could not read the previous firing's task; firing", "lambda", sc.Lambda, "task_id", id, "err", err)
		}
		return false
	}
	return !t.Status.Terminal()
}
