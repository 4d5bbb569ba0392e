package frontend_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// interleavedStore runs between, once, before the next UpdateSchedule writes: another writer (a
// firing, another update) lands between that update's read and its write.
type interleavedStore struct {
	*sqlitestore.Store
	between func()
}

func (s *interleavedStore) UpdateSchedule(ctx context.Context, sc task.Schedule, prev int64) error {
	if f := s.between; f != nil {
		s.between = nil
		f()
	}
	return s.Store.UpdateSchedule(ctx, sc, prev)
}

func newInterleaved(t *testing.T, now *time.Time) (*interleavedStore, *frontend.Service) {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	s := &interleavedStore{Store: store}
	return s, frontend.New(s, frontend.Config{
		Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()},
		Now:     func() time.Time { return *now },
	})
}

// TestUpdateScheduleAfterARacingFiring: a firing (made ahead of its time) lands between an
// update's read and its write. The firing stands, its task made once; the update is made over
// the fired schedule, not refused, since the definition did not change; its new rate fires from
// after that firing on.
func TestUpdateScheduleAfterARacingFiring(t *testing.T) {
	now := t0.UTC()
	store, svc := newInterleaved(t, &now)
	sc, _, err := svc.CreateSchedule(ctx, "echo", task.ScheduleSpec{ID: "tick", Rate: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	at := sc.NextFires[0] // 10:00 UTC
	now = at.Add(-10 * time.Second)
	store.between = func() {
		firing, err := task.New(sc.TaskSpec(at), task.Lambda{Name: "echo"}.WithDefaults(), now, task.Config{}.WithDefaults())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.FireSchedule(ctx, task.Fire(sc, &at, at.Add(time.Hour), now), sc.Version, []task.Task{firing}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := svc.UpdateSchedule(ctx, "echo", "tick", task.ScheduleUpdate{Rate: "5s", Revision: sc.Revision})
	if err != nil {
		t.Fatalf("update after a firing: %v", err)
	}
	if got.Rate != "5s" || got.Revision != 2 || got.Version != 3 || got.LastFire == nil || !got.LastFire.Equal(at) {
		t.Fatalf("updated: rate %s revision %d version %d last %v", got.Rate, got.Revision, got.Version, got.LastFire)
	}
	// The new rate counts from the update (09:59:50), its fire times after the firing made ahead:
	// not 09:59:55 nor 10:00:00, whose task id the firing holds.
	for i, f := range got.NextFires {
		if want := at.Add(time.Duration(i+1) * 5 * time.Second); !f.Equal(want) {
			t.Fatalf("next fires %v, want every 5 s from %s", got.NextFires, at.Add(5*time.Second))
		}
	}
	if _, err := store.Get(ctx, "echo", sc.FireID(at)); err != nil {
		t.Fatalf("the racing firing's task: %v", err)
	}
}

// TestUpdateScheduleRevision: an update made against a revision that another update has moved is
// refused, and writes nothing; one without a revision, or with the current one, goes in. A paused
// schedule stays paused, and lists no next fires.
func TestUpdateScheduleRevision(t *testing.T) {
	now := t0.UTC()
	store, svc := newInterleaved(t, &now)
	sc, _, err := svc.CreateSchedule(ctx, "echo", task.ScheduleSpec{ID: "nightly", Cron: "30 2 * * *", TimeZone: "Europe/Berlin"})
	if err != nil {
		t.Fatal(err)
	}
	store.between = func() {
		if _, err := svc.UpdateSchedule(ctx, "echo", "nightly", task.ScheduleUpdate{Cron: "0 4 * * *"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.UpdateSchedule(ctx, "echo", "nightly", task.ScheduleUpdate{Cron: "0 3 * * *", Revision: sc.Revision}); !errors.Is(err, task.ErrPrecondition) {
		t.Fatalf("update against a revision changed since: %v, want ErrPrecondition", err)
	}
	got, err := svc.GetSchedule(ctx, "echo", "nightly")
	if err != nil || got.Cron != "0 4 * * *" || got.Revision != 2 {
		t.Fatalf("stored: cron %q revision %d, %v; want the racing update's", got.Cron, got.Revision, err)
	}
	if _, err := svc.PauseSchedule(ctx, "echo", "nightly"); err != nil {
		t.Fatal(err)
	}
	got, err = svc.UpdateSchedule(ctx, "echo", "nightly", task.ScheduleUpdate{TimeZone: "UTC", Revision: 2})
	if err != nil || got.TimeZone != "UTC" || got.State != task.SchedulePaused || len(got.NextFires) != 0 || got.Revision != 3 {
		t.Fatalf("update of a paused schedule: %+v, %v", got, err)
	}
}

// TestUpdateScheduleCreatedAgain: a schedule deleted and created again under its id restarts at
// revision 1, so a revision does not tell the two apart; an update that names the fire_id_tag it
// read is refused (412) on the new one, and writes nothing, whether the new one was there before
// the update came or was made between its read and its write.
func TestUpdateScheduleCreatedAgain(t *testing.T) {
	now := t0.UTC()
	store, svc := newInterleaved(t, &now)
	spec := task.ScheduleSpec{ID: "nightly", Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}
	recreate := func() task.Schedule {
		t.Helper()
		if err := svc.DeleteSchedule(ctx, "echo", "nightly"); err != nil {
			t.Fatal(err)
		}
		sc, _, err := svc.CreateSchedule(ctx, "echo", spec)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	old, _, err := svc.CreateSchedule(ctx, "echo", spec)
	if err != nil {
		t.Fatal(err)
	}
	stale := task.ScheduleUpdate{Cron: "0 3 * * *", Revision: old.Revision, FireIDTag: old.FireIDTag}
	again := recreate()
	if again.Revision != old.Revision || again.FireIDTag == old.FireIDTag {
		t.Fatalf("created again: revision %d, tag %q; want revision %d again and a new tag", again.Revision, again.FireIDTag, old.Revision)
	}
	if _, err := svc.UpdateSchedule(ctx, "echo", "nightly", stale); !errors.Is(err, task.ErrPrecondition) {
		t.Fatalf("update of the schedule created again, with the deleted one's revision and tag: %v, want ErrPrecondition", err)
	}
	stale.FireIDTag = again.FireIDTag
	store.between = func() { recreate() }
	if _, err := svc.UpdateSchedule(ctx, "echo", "nightly", stale); !errors.Is(err, task.ErrPrecondition) {
		t.Fatalf("update whose schedule was created again between its read and its write: %v, want ErrPrecondition", err)
	}
	if got, err := svc.GetSchedule(ctx, "echo", "nightly"); err != nil || got.Cron != spec.Cron || got.Revision != 1 {
		t.Fatalf("stored: cron %q revision %d, %v; want the schedule as created", got.Cron, got.Revision, err)
	}
}
