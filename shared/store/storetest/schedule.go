package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

func scheduleCases() []struct {
	name string
	fn   func(*testing.T, task.Store)
} {
	return []struct {
		name string
		fn   func(*testing.T, task.Store)
	}{
		{"ScheduleRoundTrip", testScheduleRoundTrip},
		{"ScheduleList", testScheduleList},
		{"ScheduleDue", testScheduleDue},
		{"ScheduleAdvanceRace", testScheduleAdvanceRace},
		{"FireSchedule", testFireSchedule},
		{"ScheduleUpdateRacesFiring", testScheduleUpdateRacesFiring},
	}
}

// schedule returns an active rate schedule of lambda with its next firing at next.
func schedule(lambda, id string, next time.Time) task.Schedule {
	now := next.Add(-time.Minute)
	return task.Schedule{
		ID: id, Lambda: lambda, Rate: "1m", CatchUp: task.CatchUpAll, Overlap: task.OverlapSkip, State: task.ScheduleActive,
		Task:   task.Template{Payload: []byte(`{"report":"daily"}`), Priority: "high", Collection: "reports", MaxAttempts: 3},
		Anchor: now.Truncate(time.Second), NextFire: next, CreatedAt: now, UpdatedAt: now, Version: 1, Spec: "spec-" + id,
	}
}

func scheduleDiff(want, got task.Schedule) string {
	w, g := fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", got)
	if w != g || !want.NextFire.Equal(got.NextFire) {
		return fmt.Sprintf("got  %s\nwant %s", g, w)
	}
	return ""
}

func testScheduleRoundTrip(t *testing.T, s task.Store) {
	ctx := context.Background()
	l := lambdaName()
	now := base()
	sc := schedule(l, "nightly", now.Add(time.Minute))
	if err := s.CreateSchedule(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSchedule(ctx, sc); !errors.Is(err, task.ErrExists) {
		t.Fatalf("create again: got %v, want ErrExists", err)
	}
	got, err := s.GetSchedule(ctx, l, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if d := scheduleDiff(sc, got); d != "" {
		t.Fatal(d)
	}
	if _, err := s.GetSchedule(ctx, l, "missing"); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("get missing: got %v, want ErrNotFound", err)
	}
	// Paused, then fired: every field round-trips, and a stale version conflicts.
	paused := task.PauseSchedule(sc, now)
	if err := s.UpdateSchedule(ctx, paused, sc.Version); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateSchedule(ctx, paused, sc.Version); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("stale update: got %v, want ErrConflict", err)
	}
	last := now.Add(time.Minute)
	fired := task.Fire(paused, &last, now.Add(2*time.Minute), now)
	if err := s.UpdateSchedule(ctx, fired, paused.Version); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSchedule(ctx, l, "nightly"); scheduleDiff(fired, got) != "" {
		t.Fatal(scheduleDiff(fired, got))
	}
	if err := s.DeleteSchedule(ctx, l, "nightly"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSchedule(ctx, l, "nightly"); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("delete again: got %v, want ErrNotFound", err)
	}
	if err := s.UpdateSchedule(ctx, fired, fired.Version); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("update deleted: got %v, want ErrConflict", err)
	}
}

func testScheduleList(t *testing.T, s task.Store) {
	ctx := context.Background()
	l, other := lambdaName(), lambdaName()
	now := base()
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("s%02d", i)
		want = append(want, id)
		if err := s.CreateSchedule(ctx, schedule(l, id, now)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSchedule(ctx, schedule(other, "s00", now)); err != nil {
		t.Fatal(err)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 7 {
			t.Fatal("the cursor never ends")
		}
		page, next, err := s.ListSchedules(ctx, l, cursor, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 {
			t.Fatalf("a page of %d, limit 3", len(page))
		}
		for _, sc := range page {
			got = append(got, sc.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
}

func testScheduleDue(t *testing.T, s task.Store) {
	ctx := context.Background()
	l := lambdaName()
	now := base()
	for i, at := range []time.Duration{-3 * time.Second, -time.Second, -2 * time.Second, time.Second, time.Hour} {
		if err := s.CreateSchedule(ctx, schedule(l, fmt.Sprintf("d%d", i), now.Add(at))); err != nil {
			t.Fatal(err)
		}
	}
	paused := task.PauseSchedule(schedule(l, "paused", now.Add(-time.Hour)), now)
	if err := s.CreateSchedule(ctx, paused); err != nil {
		t.Fatal(err)
	}
	due := func(before time.Time, limit int) string {
		t.Helper()
		// The index of a store may lag its writes: wait for what must be there.
		var got []task.Schedule
		for range 50 {
			var err error
			if got, err = s.DueSchedules(ctx, l, before, limit); err != nil {
				t.Fatal(err)
			}
			if len(got) == min(limit, 3) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		var ids []string
		for _, sc := range got {
			ids = append(ids, sc.ID)
		}
		return fmt.Sprint(ids)
	}
	if got := due(now, 10); got != "[d0 d2 d1]" {
		t.Fatalf("due by now: %s, want [d0 d2 d1], earliest first, none paused or later", got)
	}
	if got := due(now, 2); got != "[d0 d2]" {
		t.Fatalf("due by now, 2: %s", got)
	}
	// Fired: its next firing moves out of the range.
	d0, err := s.GetSchedule(ctx, l, "d0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateSchedule(ctx, task.Fire(d0, &d0.NextFire, now.Add(time.Minute), now), d0.Version); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if got, _ := s.DueSchedules(ctx, l, now, 10); len(got) == 2 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("a schedule fired is still due")
}

// testScheduleAdvanceRace: consumers that read the same version of a due schedule race to fire
// it; one advance wins.
func testScheduleAdvanceRace(t *testing.T, s task.Store) {
	ctx := context.Background()
	l := lambdaName()
	now := base()
	sc := schedule(l, "race", now)
	if err := s.CreateSchedule(ctx, sc); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			next := task.Fire(sc, &sc.NextFire, now.Add(time.Duration(i+1)*time.Minute), now)
			errs[i] = s.UpdateSchedule(ctx, next, sc.Version)
		})
	}
	wg.Wait()
	winner := oneWinner(t, "advance", "won", errs)
	got, err := s.GetSchedule(ctx, l, "race")
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(time.Duration(winner+1) * time.Minute); !got.NextFire.Equal(want) || got.Version != sc.Version+1 {
		t.Fatalf("stored next %s version %d, want %s and %d", got.NextFire, got.Version, want, sc.Version+1)
	}
}

// testFireSchedule: a firing write creates the free tasks and advances the schedule, at once; a
// stale version or another incarnation writes nothing and answers ErrConflict; a task whose id
// is taken is reported not created, and the rest of the write goes in.
func testFireSchedule(t *testing.T, s task.Store) {
	ctx := t.Context()
	l := task.Lambda{Name: lambdaName()}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := base().Truncate(time.Second)
	sc := schedule(l.Name, "fire", now)
	sc.Incarnation = "INC1"
	if err := s.CreateSchedule(ctx, sc); err != nil {
		t.Fatal(err)
	}
	firings := func(sc task.Schedule, ats ...time.Time) []task.Task {
		var tasks []task.Task
		for _, at := range ats {
			tk, err := task.New(sc.TaskSpec(at), l, now, cfg)
			if err != nil {
				t.Fatal(err)
			}
			tasks = append(tasks, tk)
		}
		return tasks
	}
	exists := func(id string) bool {
		_, err := s.Get(ctx, l.Name, id)
		if err != nil && !errors.Is(err, task.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	at1, at2, at3 := now, now.Add(time.Minute), now.Add(2*time.Minute)

	// The first write creates both tasks and moves the schedule on.
	fired := task.Fire(sc, &at2, at3, now)
	created, err := s.FireSchedule(ctx, fired, sc.Version, firings(sc, at1, at2))
	if err != nil || len(created) != 2 || !created[0] || !created[1] {
		t.Fatalf("fire: created %v, %v; want [true true]", created, err)
	}
	got, err := s.GetSchedule(ctx, l.Name, sc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != sc.Version+1 || !got.NextFire.Equal(at3) || got.LastFire == nil || !got.LastFire.Equal(at2) || got.Incarnation != "INC1" {
		t.Fatalf("after the fire: version %d next %s last %v incarnation %q", got.Version, got.NextFire, got.LastFire, got.Incarnation)
	}
	if !exists(sc.FireID(at1)) || !exists(sc.FireID(at2)) {
		t.Fatal("the firings' tasks are not stored")
	}

	// A write from the version before, or of another incarnation, creates nothing.
	at4 := now.Add(3 * time.Minute)
	other := got
	other.Incarnation = "INC2"
	for what, w := range map[string]struct {
		sc   task.Schedule
		prev int64
	}{"a stale version": {sc, sc.Version}, "another incarnation": {other, got.Version}} {
		_, err := s.FireSchedule(ctx, task.Fire(w.sc, &at3, at4, now), w.prev, firings(w.sc, at3))
		if !errors.Is(err, task.ErrConflict) {
			t.Fatalf("fire with %s: got %v, want ErrConflict", what, err)
		}
		if exists(w.sc.FireID(at3)) {
			t.Fatalf("fire with %s created a task", what)
		}
	}
	if again, err := s.GetSchedule(ctx, l.Name, sc.ID); err != nil || again.Version != got.Version || !again.NextFire.Equal(at3) {
		t.Fatalf("refused fires moved the schedule: version %d next %s, %v", again.Version, again.NextFire, err)
	}

	// A taken id is reported not created; the other task and the advance go through.
	taken, err := task.New(task.Spec{ID: got.FireID(at3), Payload: []byte(`{"mine":true}`)}, l, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, taken)
	created, err = s.FireSchedule(ctx, task.Fire(got, &at4, at4.Add(time.Minute), now), got.Version, firings(got, at3, at4))
	if err != nil || len(created) != 2 || created[0] || !created[1] {
		t.Fatalf("fire over a taken id: created %v, %v; want [false true]", created, err)
	}
	if tk, err := s.Get(ctx, l.Name, got.FireID(at3)); err != nil || string(tk.Payload) != `{"mine":true}` {
		t.Fatalf("the taken id's task was changed: %s, %v", tk.Payload, err)
	}
	if !exists(got.FireID(at4)) {
		t.Fatal("the free firing's task is not stored")
	}
	if last, err := s.GetSchedule(ctx, l.Name, sc.ID); err != nil || last.Version != got.Version+1 || !last.NextFire.Equal(at4.Add(time.Minute)) {
		t.Fatalf("the advance over a taken id: version %d next %s, %v", last.Version, last.NextFire, err)
	}
}

// testScheduleUpdateRacesFiring: an update of a schedule's definition (a new rate, template and
// next firing: task.UpdateSchedule) and a firing that read the same version race; whichever writes
// first wins, and the other writes nothing: a firing that loses creates no task, an update that
// loses leaves the fired schedule. The due range follows the updated next firing.
func testScheduleUpdateRacesFiring(t *testing.T, s task.Store) {
	ctx := t.Context()
	l := task.Lambda{Name: lambdaName()}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := base().Truncate(time.Second)
	weekly := task.Template{Payload: []byte(`{"report":"weekly"}`)}
	for _, updateFirst := range []bool{true, false} {
		sc := schedule(l.Name, fmt.Sprintf("update-first-%v", updateFirst), now)
		sc.Incarnation, sc.Revision = "INC1", 1
		if err := s.CreateSchedule(ctx, sc); err != nil {
			t.Fatal(err)
		}
		updated, err := task.UpdateSchedule(sc, task.ScheduleUpdate{Rate: "5m", Task: &weekly, Revision: 1}, l, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		fired := task.Fire(sc, &sc.NextFire, now.Add(time.Minute), now)
		firing, err := task.New(sc.TaskSpec(sc.NextFire), l, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		update := func() error { return s.UpdateSchedule(ctx, updated, sc.Version) }
		fire := func() error { _, err := s.FireSchedule(ctx, fired, sc.Version, []task.Task{firing}); return err }
		first, second, want := fire, update, fired
		if updateFirst {
			first, second, want = update, fire, updated
		}
		if err := first(); err != nil {
			t.Fatalf("update first %v: the first write: %v", updateFirst, err)
		}
		if err := second(); !errors.Is(err, task.ErrConflict) {
			t.Fatalf("update first %v: the second write from the same version: %v, want ErrConflict", updateFirst, err)
		}
		got, err := s.GetSchedule(ctx, l.Name, sc.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d := scheduleDiff(want, got); d != "" {
			t.Fatalf("update first %v: %s", updateFirst, d)
		}
		_, err = s.Get(ctx, l.Name, firing.ID)
		if made := err == nil; made == updateFirst || err != nil && !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("update first %v: the firing's task: %v", updateFirst, err)
		}
	}
	// The updated schedule is due at its new next firing, not before; the fired one at its own.
	due := func(before time.Time) string {
		got, err := s.DueSchedules(ctx, l.Name, before, 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sc := range got {
			ids = append(ids, sc.ID)
		}
		return fmt.Sprint(ids)
	}
	for _, w := range []struct {
		before time.Time
		ids    string
	}{{now, "[]"}, {now.Add(time.Minute), "[update-first-false]"}, {now.Add(5 * time.Minute), "[update-first-false update-first-true]"}} {
		// The index of a store may lag its writes: wait for what must be there.
		got := due(w.before)
		for i := 0; i < 50 && got != w.ids; i++ {
			time.Sleep(20 * time.Millisecond)
			got = due(w.before)
		}
		if got != w.ids {
			t.Fatalf("due by %s: %s, want %s", w.before.Sub(now), got, w.ids)
		}
	}
}
