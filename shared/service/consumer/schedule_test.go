package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/task"
)

func (e *env) newSchedule(t *testing.T, lambda string, spec task.ScheduleSpec) task.Schedule {
	t.Helper()
	sc, err := task.NewSchedule(spec, e.ls[lambda], e.now, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CreateSchedule(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

// firedIDs lists the ids of the lambda's tasks, in creation order.
func (e *env) firedIDs(t *testing.T, lambda string) []string {
	t.Helper()
	tasks, _, err := e.store.List(context.Background(), task.ListParams{Lambda: lambda, Limit: task.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tk := range tasks {
		ids = append(ids, tk.ID)
	}
	return ids
}

func fireIDs(sc task.Schedule, times ...time.Time) []string {
	var ids []string
	for _, at := range times {
		ids = append(ids, sc.FireID(at))
	}
	return ids
}

func sameIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: tasks %v, want %v", what, got, want)
	}
	seen := map[string]bool{}
	for _, id := range got {
		seen[id] = true
	}
	for _, id := range want {
		if !seen[id] {
			t.Fatalf("%s: tasks %v, want %v", what, got, want)
		}
	}
}

// TestScheduleFiresOncePerFiring: a rate schedule swept every second makes one task per firing,
// due at its fire time, and the sweep that made it enqueues it.
func TestScheduleFiresOncePerFiring(t *testing.T) {
	e := newEnv(t, 0, "report")
	created := e.now
	sc := e.newSchedule(t, "report", task.ScheduleSpec{ID: "tick", Rate: "2s", Task: task.Template{Payload: []byte(`{"n":1}`), Collection: "ticks"}})
	var want []time.Time
	for i := range 10 {
		e.now = created.Add(time.Duration(i+1) * time.Second)
		st := e.sweep(t)
		if (i+1)%2 == 0 {
			want = append(want, e.now)
			if st.Fired != 1 || st.Enqueued != 1 {
				t.Fatalf("at %s: fired %d, enqueued %d, want 1 and 1", e.now, st.Fired, st.Enqueued)
			}
		}
	}
	sameIDs(t, "10 s of rate(2s)", e.firedIDs(t, "report"), fireIDs(sc, want...))
	tk, err := e.store.Get(context.Background(), "report", sc.FireID(want[0]))
	if err != nil {
		t.Fatal(err)
	}
	if string(tk.Payload) != `{"n":1}` || tk.Collection != "ticks" || !tk.RunAt.Equal(want[0]) {
		t.Fatalf("task %+v", tk)
	}
	got, _ := e.store.GetSchedule(context.Background(), "report", sc.ID)
	if !got.NextFire.Equal(created.Add(12*time.Second)) || got.LastFire == nil || !got.LastFire.Equal(want[4]) {
		t.Fatalf("schedule next %s last %v", got.NextFire, got.LastFire)
	}
}

// barrierStore holds every DueSchedules answer until n of them have been read, so that n
// consumers fire from the same version of a schedule.
type barrierStore struct {
	task.Store
	wg *sync.WaitGroup
}

func (s barrierStore) DueSchedules(ctx context.Context, lambda string, before time.Time, limit int) ([]task.Schedule, error) {
	due, err := s.Store.DueSchedules(ctx, lambda, before, limit)
	if len(due) > 0 {
		s.wg.Done()
		s.wg.Wait()
	}
	return due, err
}

// TestScheduleTwoConsumersRace: consumers that read the same due schedule at once, after a stop
// (catch-up all), make each firing's task once.
func TestScheduleTwoConsumersRace(t *testing.T) {
	e := newEnv(t, 0, "report")
	created := e.now
	sc := e.newSchedule(t, "report", task.ScheduleSpec{ID: "race", Rate: "1s", CatchUp: task.CatchUpAll})
	const racers = 4
	var barrier sync.WaitGroup
	barrier.Add(racers)
	var conses []*consumer.Consumer
	for range racers {
		conses = append(conses, consumer.New(barrierStore{e.store, &barrier}, e.queue, consumer.Config{
			Lambdas: task.FixedCatalog{e.ls["report"]}, Task: e.cfg, Now: func() time.Time { return e.now },
		}))
	}
	e.now = created.Add(5 * time.Second)
	var fired sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for _, c := range conses {
		fired.Go(func() {
			st, err := c.Sweep(context.Background())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += st.Fired
			mu.Unlock()
		})
	}
	fired.Wait()
	var want []time.Time
	for i := range 5 {
		want = append(want, created.Add(time.Duration(i+1)*time.Second))
	}
	sameIDs(t, "racing consumers", e.firedIDs(t, "report"), fireIDs(sc, want...))
	if total != 5 {
		t.Fatalf("the consumers say they fired %d tasks, want 5", total)
	}
	got, _ := e.store.GetSchedule(context.Background(), "report", sc.ID)
	if got.Version != sc.Version+1 || !got.NextFire.Equal(created.Add(6*time.Second)) {
		t.Fatalf("schedule version %d next %s: advanced more than once, or not to the next firing", got.Version, got.NextFire)
	}
}

func TestSchedulePausedFiresNothing(t *testing.T) {
	e := newEnv(t, 0, "report")
	created := e.now
	sc := e.newSchedule(t, "report", task.ScheduleSpec{ID: "paused", Rate: "1s"})
	if err := e.store.UpdateSchedule(context.Background(), task.PauseSchedule(sc, e.now), sc.Version); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		e.now = created.Add(time.Duration(i+1) * time.Second)
		if st := e.sweep(t); st.Fired != 0 {
			t.Fatalf("a paused schedule fired %d", st.Fired)
		}
	}
	if ids := e.firedIDs(t, "report"); len(ids) != 0 {
		t.Fatalf("tasks %v", ids)
	}
}

// TestScheduleCatchUp: after 10 s without a sweep a rate(2s) schedule fires the latest missed
// firing (skip), or all five (all).
func TestScheduleCatchUp(t *testing.T) {
	for _, tc := range []struct {
		catchUp string
		fires   []int // seconds after creation
	}{
		{task.CatchUpSkip, []int{2, 12}},
		{task.CatchUpAll, []int{2, 4, 6, 8, 10, 12}},
	} {
		t.Run(tc.catchUp, func(t *testing.T) {
			e := newEnv(t, 0, "report")
			created := e.now
			sc := e.newSchedule(t, "report", task.ScheduleSpec{ID: "c", Rate: "2s", CatchUp: tc.catchUp})
			e.now = created.Add(2 * time.Second)
			e.sweep(t)
			e.now = created.Add(12*time.Second + 500*time.Millisecond) // stopped for 10 s
			e.sweep(t)
			var want []time.Time
			for _, s := range tc.fires {
				want = append(want, created.Add(time.Duration(s)*time.Second))
			}
			sameIDs(t, tc.catchUp, e.firedIDs(t, "report"), fireIDs(sc, want...))
		})
	}
}

// TestScheduleOverlapSkip: a firing makes no task while the previous firing's task runs.
func TestScheduleOverlapSkip(t *testing.T) {
	e := newEnv(t, 0, "report")
	created := e.now
	sc := e.newSchedule(t, "report", task.ScheduleSpec{ID: "o", Rate: "1s", Overlap: task.OverlapSkip})
	e.now = created.Add(time.Second)
	e.sweep(t) // fires 1 s: enqueued, not ended
	e.now = created.Add(2 * time.Second)
	if st := e.sweep(t); st.Fired != 0 || st.FiringsSkipped != 1 {
		t.Fatalf("while running: fired %d, skipped %d", st.Fired, st.FiringsSkipped)
	}
	first := sc.FireID(created.Add(time.Second))
	if _, err := task.Apply(context.Background(), e.store, "report", first, func(tk task.Task) (task.Task, error) {
		return task.Cancel(tk, e.now)
	}); err != nil {
		t.Fatal(err)
	}
	e.now = created.Add(3 * time.Second)
	if st := e.sweep(t); st.Fired != 1 {
		t.Fatalf("after the end: fired %d", st.Fired)
	}
	sameIDs(t, "overlap skip", e.firedIDs(t, "report"), fireIDs(sc, created.Add(time.Second), created.Add(3*time.Second)))
}

// TestScheduleSendsAhead: with the frontend as its Scheduler, a pass fires a schedule up to a poll
// interval early, and the task goes to its queue delayed to its fire time.
func TestScheduleSendsAhead(t *testing.T) {
	e := newEnv(t, 0, "report")
	created := e.now
	svc := frontend.New(e.store, frontend.Config{Lambdas: task.FixedCatalog{e.ls["report"]}, Task: e.cfg, Now: func() time.Time { return e.now }, Queue: e.queue})
	cons := consumer.New(e.store, e.queue, consumer.Config{Lambdas: task.FixedCatalog{e.ls["report"]}, Task: e.cfg, Now: func() time.Time { return e.now }, Scheduler: svc})
	sc := e.newSchedule(t, "report", task.ScheduleSpec{ID: "ahead", Rate: "2s"})
	e.now = created.Add(1500 * time.Millisecond) // half a second before the first firing
	st, err := cons.Sweep(context.Background())
	if err != nil || st.Fired != 1 {
		t.Fatalf("fired %d, %v", st.Fired, err)
	}
	tk, err := e.store.Get(context.Background(), "report", sc.FireID(created.Add(2*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if tk.Status != task.StatusEnqueued || !tk.RunAt.Equal(created.Add(2*time.Second)) {
		t.Fatalf("task %s run at %s, want enqueued ahead at its fire time", tk.Status, tk.RunAt)
	}
}

// TestStopWhenIdleWaitsForSchedule: a schedule's next firing before the run's end keeps its
// lambda sweeping, as a task due then would, so that a consumer that stops when idle fires it on
// time; the run ends once nothing else comes due.
func TestStopWhenIdleWaitsForSchedule(t *testing.T) {
	e := newRealEnv(t, "a")
	sc, err := task.NewSchedule(task.ScheduleSpec{ID: "soon", Rate: "2s"}, e.ls["a"], time.Now(), task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CreateSchedule(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	// The first firing is 1 to 2 s away, the second after the run's end. Its task runs (a task in
	// flight keeps its lambda sweeping).
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go e.work(ctx, "a")
	rs := e.cons.Run(t.Context(), consumer.RunParams{Interval: 20 * time.Millisecond, Until: sc.NextFire.Add(time.Second), StopWhenIdle: true})
	if rs.Fired != 1 || rs.Stopped != 1 || rs.Failed != 0 {
		t.Fatalf("run: %+v; want the firing made, then the lambda stopped", rs)
	}
	if _, err := e.store.Get(t.Context(), "a", sc.FireID(sc.NextFire)); err != nil {
		t.Fatal(err)
	}
}

// TestScheduleOverlapSkipSendsAhead: with sending ahead, overlap skip judges a firing at its own
// fire time: a rate(1s) schedule whose every task ends half a second after its fire time loses
// no firing, though each pass fires up to a poll interval early, when the previous task has not
// ended yet.
func TestScheduleOverlapSkipSendsAhead(t *testing.T) {
	e := newEnv(t, 0, "report")
	created := e.now
	svc := frontend.New(e.store, frontend.Config{Lambdas: task.FixedCatalog{e.ls["report"]}, Task: e.cfg, Now: func() time.Time { return e.now }, Queue: e.queue})
	cons := consumer.New(e.store, e.queue, consumer.Config{Lambdas: task.FixedCatalog{e.ls["report"]}, Task: e.cfg, Now: func() time.Time { return e.now }, Scheduler: svc})
	sc := e.newSchedule(t, "report", task.ScheduleSpec{ID: "o", Rate: "1s", Overlap: task.OverlapSkip})
	var want []time.Time
	for step := 1; step <= 16; step++ { // a pass every half second
		e.now = created.Add(time.Duration(step) * 500 * time.Millisecond)
		if _, err := cons.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if step%2 == 0 {
			want = append(want, e.now)
			continue
		}
		// Half a second after its fire time, the previous firing's task ends.
		at := e.now.Add(-500 * time.Millisecond)
		if _, err := task.Apply(context.Background(), e.store, "report", sc.FireID(at), func(tk task.Task) (task.Task, error) {
			return task.Cancel(tk, e.now)
		}); err != nil && !errors.Is(err, task.ErrNotFound) {
			t.Fatal(err)
		}
	}
	sameIDs(t, "8 s of rate(1s), each task ended 0.5 s after its fire time", e.firedIDs(t, "report"), fireIDs(sc, want...))
}
