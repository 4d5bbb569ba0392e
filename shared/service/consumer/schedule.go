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
// A pass makes a schedule's firings in one atomic write through the Scheduler: their tasks (ids
// task.FireID) are created, those whose ids are free, and the schedule moves on, if it is still
// the version (and incarnation) the pass read. Two consumers that read the same version both
// try, and one write goes in; the other creates nothing. A pause or a delete moves the version or
// removes the schedule, so a pass that read the schedule before it creates nothing after it. So a
// firing makes one task however often it is seen, and none once a pause or delete is answered
// (docs/guarantees.md, "One task per firing").

// MaxSchedulesPerPass bounds the due schedules one pass of a lambda reads and fires; a pass that
// found this many is followed by another at once.
const MaxSchedulesPerPass = 100

// Scheduler makes a schedule's firings: frontend.Service, which sends a task due within 15
// minutes to its queue itself (delayed to its run time) once it is stored.
type Scheduler interface {
	// FireSchedule creates the tasks of fired's firings at ats (fired.TaskSpec) and writes fired,
	// the schedule moved on from version prev, in one atomic write
	// (task.ScheduleStore.FireSchedule): task.ErrConflict, and nothing created, if the schedule
	// changed since it was read. created tells which tasks it created: one whose id was taken
	// was made before.
	FireSchedule(ctx context.Context, fired task.Schedule, prev int64, ats []time.Time) (created []bool, err error)
}

// storeScheduler makes firings straight in the store, their tasks new, for the sweep to enqueue:
// the consumer's Scheduler when its Config names none.
type storeScheduler struct {
	c *Consumer
}

func (s storeScheduler) FireSchedule(ctx context.Context, fired task.Schedule, prev int64, ats []time.Time) ([]bool, error) {
	l, ok, err := s.c.lambdas.Lambda(ctx, fired.Lambda)
	if err != nil {
		return nil, err
	}
	if !ok { // went since the pass began
		return nil, task.Errorf(task.ErrNotFound, "lambda %q is not registered", fired.Lambda)
	}
	now := s.c.now().UTC()
	tasks := make([]task.Task, len(ats))
	for i, at := range ats {
		var err error
		if tasks[i], err = task.New(fired.TaskSpec(at), l, now, s.c.cfg); err != nil {
			return nil, err
		}
	}
	return s.c.store.FireSchedule(ctx, fired, prev, tasks)
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

// fire makes the firings of one schedule due by horizon and advances it, in one write. Past
// task.MaxFiringsPerWrite firings it makes those and leaves the schedule due at the next one.
//
// Overlap skip judges a firing at its own fire time, not before: a firing still ahead of the
// pass (fired early by scheduleLead) whose previous task has not ended stops the pass there, the
// schedule due at that firing, so that the first pass at or after its time judges it (and the
// previous task may have ended by then). A firing whose time has come with the previous task not
// ended is skipped.
func (c *passState) fire(ctx context.Context, sc task.Schedule, now, horizon time.Time) {
	log := c.log.With("lambda", sc.Lambda, "schedule", sc.ID)
	fires, next, err := sc.Firings(now, horizon)
	if err != nil {
		log.Error("schedule cannot compute its fire times", "err", err)
		return
	}
	last := sc.LastFire
	var ats []time.Time
	skipped := 0
	for _, at := range fires {
		if len(ats) == task.MaxFiringsPerWrite {
			next = at
			break
		}
		// A firing made by this pass has not ended: its task does not exist yet.
		if sc.Overlap == task.OverlapSkip && last != nil && (len(ats) > 0 || c.running(ctx, sc, *last)) {
			if at.After(now) {
				next = at // judged by a pass at or after its time
				break
			}
			skipped++
			continue
		}
		ats = append(ats, at)
		last = &at
	}
	if len(ats) == 0 {
		if skipped > 0 || !next.Equal(sc.NextFire) {
			c.countFirings(0, skipped)
			c.advance(ctx, sc, sc.LastFire, next, now)
		}
		return
	}
	created, err := c.scheduler.FireSchedule(ctx, task.Fire(sc, last, next, now), sc.Version, ats)
	switch {
	case err == nil:
		n := 0
		for _, ok := range created {
			if ok {
				n++
			}
		}
		c.countFirings(n, skipped)
	case errors.Is(err, task.ErrConflict):
		// Another pass made these firings, or the schedule was paused, changed or deleted since
		// this pass read it: nothing was created.
	case errors.Is(err, task.ErrInvalid), errors.Is(err, task.ErrNotFound), errors.Is(err, task.ErrTooLarge):
		// The template no longer makes a task (a priority or the lambda gone): these firings
		// cannot be made, now or later.
		log.Error("a schedule's firings are refused; they are skipped", "firings", len(ats), "err", err)
		c.countFirings(0, skipped+len(ats))
		c.advance(ctx, sc, sc.LastFire, next, now)
	default:
		log.Warn("could not make a schedule's firings; the next pass makes them again", "firings", len(ats), "err", err)
	}
}

// advance moves the schedule to its next firing without making any, if no one else moved it
// since it was read.
func (c *passState) advance(ctx context.Context, sc task.Schedule, last *time.Time, next, now time.Time) {
	err := c.store.UpdateSchedule(ctx, task.Fire(sc, last, next, now), sc.Version)
	if err != nil && !errors.Is(err, task.ErrConflict) {
		c.log.Warn("could not advance a schedule; the next pass decides its firings again", "lambda", sc.Lambda, "schedule", sc.ID, "err", err)
	}
}

// running reports whether the task of the firing at has not ended (overlap skip). A task that
// is gone (retention removed it) has ended; so has one whose read fails: a firing made twice in
// parallel is what allow does, a firing lost for a read error is worse.
func (c *passState) running(ctx context.Context, sc task.Schedule, at time.Time) bool {
	id := sc.FireID(at)
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
