package frontend

import (
	"context"
	"errors"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Periodic schedules (task/schedule.go): the API keeps them in the store; the consumer fires them,
// through FireSchedule.

// FireSchedule makes the firings of a schedule at ats, for the consumer's pass that read it at
// version prev: in one atomic write (task.ScheduleStore.FireSchedule) it creates their tasks,
// those whose ids are free, and writes fired, the schedule moved on, if the schedule has not
// changed since; otherwise it creates nothing and returns task.ErrConflict. Like Schedule, it
// sends a task due within task.MaxSendAhead to its queue itself (see ahead.go), once stored; a
// send that fails leaves it to the sweep. It reports which tasks it created.
func (s *Service) FireSchedule(ctx context.Context, fired task.Schedule, prev int64, ats []time.Time) ([]bool, error) {
	l, err := s.lambda(ctx, fired.Lambda)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	tasks := make([]task.Task, len(ats))
	for i, at := range ats {
		if tasks[i], err = task.New(fired.TaskSpec(at), l, now, s.cfg); err != nil {
			return nil, err
		}
	}
	msgs := s.enqueueAhead(ctx, tasks, now)
	created, err := s.store.FireSchedule(ctx, fired, prev, tasks)
	if err != nil {
		if !task.Refused(err) {
			s.send(ctx, msgs, now) // the write may have landed: a message too many fails its claim
		}
		return nil, err
	}
	// A task whose id was taken is not this firing's to send.
	made := map[string]bool{}
	for i, t := range tasks {
		made[t.ID] = created[i]
	}
	sent := msgs[:0:0]
	for _, m := range msgs {
		if made[m.TaskID] {
			sent = append(sent, m)
		}
	}
	s.send(ctx, sent, now)
	if len(sent) < len(tasks) {
		s.notify()
	}
	return created, nil
}

// CreateSchedule creates a schedule. Like Schedule it is idempotent on the id: the same request
// again returns the stored schedule with created false; a different one with a taken id fails
// with task.ErrConflict.
func (s *Service) CreateSchedule(ctx context.Context, lambda string, spec task.ScheduleSpec) (sc task.Schedule, created bool, err error) {
	l, err := s.lambda(ctx, lambda)
	if err != nil {
		return task.Schedule{}, false, err
	}
	now := s.now().UTC()
	sc, err = task.NewSchedule(spec, l, now, s.cfg)
	if err != nil {
		return task.Schedule{}, false, err
	}
	switch err := s.store.CreateSchedule(ctx, sc); {
	case errors.Is(err, task.ErrExists):
		old, err := s.store.GetSchedule(ctx, lambda, sc.ID)
		if err != nil {
			return task.Schedule{}, false, err
		}
		if old.Spec != sc.Spec {
			return task.Schedule{}, false, task.Errorf(task.ErrConflict, "schedule %q already exists with a different request", sc.ID)
		}
		return s.withNextFires(old), false, nil
	case err != nil:
		return task.Schedule{}, false, err
	}
	s.notify() // a local consumer looks ahead again: the first firing may be before its next look
	return s.withNextFires(sc), true, nil
}

// withNextFires sets the next fire times an answer shows, in the schedule's zone, and the tag of
// its firings' ids. A schedule stored before revisions is at its first.
func (s *Service) withNextFires(sc task.Schedule) task.Schedule {
	sc.NextFires = sc.Upcoming(task.NextFiresShown)
	if sc.LastFire != nil {
		last := sc.LastFire.In(sc.Location())
		sc.LastFire = &last
	}
	sc.FireIDTag = task.FireIDTag(sc.Incarnation)
	sc.Revision = max(sc.Revision, 1)
	return sc
}

// GetSchedule returns a schedule with its next five fire times.
func (s *Service) GetSchedule(ctx context.Context, lambda, id string) (task.Schedule, error) {
	if _, err := s.lambda(ctx, lambda); err != nil {
		return task.Schedule{}, err
	}
	if err := task.ValidateID("schedule id", id); err != nil {
		return task.Schedule{}, err
	}
	sc, err := s.store.GetSchedule(ctx, lambda, id)
	if err != nil {
		return task.Schedule{}, err
	}
	return s.withNextFires(sc), nil
}

// ListSchedules returns a page of a lambda's schedules in id order, each with its next fire times.
func (s *Service) ListSchedules(ctx context.Context, lambda, cursor string, limit int) ([]task.Schedule, string, error) {
	if _, err := s.lambda(ctx, lambda); err != nil {
		return nil, "", err
	}
	if limit < 0 || limit > task.MaxListLimit {
		return nil, "", task.Errorf(task.ErrInvalid, "limit must be in 1..%d, got %d", task.MaxListLimit, limit)
	}
	if limit == 0 {
		limit = task.DefaultListLimit
	}
	if cursor != "" {
		if err := task.ValidateID("cursor", cursor); err != nil {
			return nil, "", err
		}
	}
	list, next, err := s.store.ListSchedules(ctx, lambda, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	for i := range list {
		list[i] = s.withNextFires(list[i])
	}
	return list, next, nil
}

// PauseSchedule stops a schedule from firing, and cancels the tasks it made ahead of their time
// whose fire time is after now (cancelMadeAhead): once answered, no task of a later fire time
// runs. Pausing a paused one writes nothing but cancels them again, so that a retry of a pause
// whose cancels failed completes it.
func (s *Service) PauseSchedule(ctx context.Context, lambda, id string) (task.Schedule, error) {
	sc, err := s.applySchedule(ctx, lambda, id, func(sc task.Schedule) (task.Schedule, error) {
		return task.PauseSchedule(sc, s.now()), nil
	})
	if err != nil {
		return task.Schedule{}, err
	}
	if err := s.cancelMadeAhead(ctx, sc); err != nil {
		return task.Schedule{}, err
	}
	return sc, nil
}

// cancelMadeAhead cancels the tasks that a paused schedule made ahead of their time (a pass fires
// up to a poll interval early) whose fire time is after now: those of its fire times after now
// up to its LastFire, at most task.MaxFiringsPerWrite. Paused, it makes no more (a firing write
// is conditional on the version the pause moved), so its LastFire is final. A task not yet
// started ends cancelled; one that is gone, or that ended, is left.
func (s *Service) cancelMadeAhead(ctx context.Context, sc task.Schedule) error {
	if sc.LastFire == nil {
		return nil
	}
	at, err := sc.Next(s.now().UTC())
	for n := 0; err == nil && !at.After(*sc.LastFire) && n < task.MaxFiringsPerWrite; n++ {
		t, _, cerr := s.cancel(ctx, sc.Lambda, sc.FireID(at))
		ended := errors.Is(cerr, task.ErrConflict) && t.Status.Terminal()
		if cerr != nil && !errors.Is(cerr, task.ErrNotFound) && !ended {
			return cerr
		}
		at, err = sc.Next(at)
	}
	return nil
}

// UpdateSchedule changes a schedule's definition (task.UpdateSchedule), conditional on its
// revision if the update names one: task.ErrPrecondition if another update changed it since.
// The write is conditional on the version read, as a firing's is, so of an update and a firing
// that read the same version one goes in (docs/guarantees.md, "One task per firing"); an update
// that loses to a firing is made again over the fired schedule.
func (s *Service) UpdateSchedule(ctx context.Context, lambda, id string, u task.ScheduleUpdate) (task.Schedule, error) {
	l, err := s.lambda(ctx, lambda)
	if err != nil {
		return task.Schedule{}, err
	}
	return s.applySchedule(ctx, lambda, id, func(sc task.Schedule) (task.Schedule, error) {
		return task.UpdateSchedule(sc, u, l, s.now(), s.cfg)
	})
}

// ResumeSchedule makes a paused schedule fire again from its next fire time after now.
func (s *Service) ResumeSchedule(ctx context.Context, lambda, id string) (task.Schedule, error) {
	return s.applySchedule(ctx, lambda, id, func(sc task.Schedule) (task.Schedule, error) {
		return task.ResumeSchedule(sc, s.now())
	})
}

// applySchedule reads a schedule, changes it with fn and writes it conditionally, again if a
// firing moved it in between.
func (s *Service) applySchedule(ctx context.Context, lambda, id string, fn func(task.Schedule) (task.Schedule, error)) (task.Schedule, error) {
	for range 5 {
		sc, err := s.GetSchedule(ctx, lambda, id)
		if err != nil {
			return task.Schedule{}, err
		}
		next, err := fn(sc)
		if err != nil {
			return task.Schedule{}, err
		}
		if next.Version == sc.Version {
			return sc, nil // no change
		}
		switch err := s.store.UpdateSchedule(ctx, next, sc.Version); {
		case err == nil:
			s.notify()
			return s.withNextFires(next), nil
		case !errors.Is(err, task.ErrConflict):
			return task.Schedule{}, err
		}
	}
	return task.Schedule{}, task.Errorf(task.ErrConflict, "schedule %s/%s keeps changing; try again", lambda, id)
}

// DeleteSchedule removes a schedule; the tasks it created stay, but for those it made ahead of
// their time whose fire time is after now, which it cancels. It pauses the schedule first, so
// that no pass makes more while it cancels them, and deletes it once they are: a delete that
// fails part way leaves the schedule paused, and its retry completes it.
func (s *Service) DeleteSchedule(ctx context.Context, lambda, id string) error {
	if _, err := s.PauseSchedule(ctx, lambda, id); err != nil {
		return err
	}
	return s.store.DeleteSchedule(ctx, lambda, id)
}
