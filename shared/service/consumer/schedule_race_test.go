package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// TestScheduleRace runs consumers' passes at once, each pass sending ahead through the frontend,
// while schedules are paused, resumed, and deleted and created again under their ids, the pauses
// and deletes between a pass's read of a schedule and its write: every task is made by an incarnation of its
// schedule that was active when the write began, for a fire time of that active time (up to the
// lead after its end, and then cancelled: none runs after a pause or delete was answered), one
// per firing, and every firing of every active time of every incarnation that a full round of
// passes came to is made. On the embedded store and on DynamoDB.
func TestScheduleRace(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		scheduleRace(t, store)
	})
	t.Run("dynamodb", func(t *testing.T) {
		scheduleRace(t, awstest.NewStore(t, "sched-race", dynamostore.Config{Shards: 1}))
	})
}

// raceClock is the clock of every pass and API call of the race. A stop (pause, delete) is
// recorded at a tick taken after it was answered, so that a write that began at or after that
// instant began after the answer.
type raceClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *raceClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *raceClock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// raceEvent is a start (create, resume) or a stop (pause, delete) of an incarnation.
type raceEvent struct {
	inc  int
	stop bool
	at   time.Time
}

// raceMade is a task that a firing write created.
type raceMade struct {
	id    string
	inc   int
	fire  time.Time
	began time.Time // the clock when the write began
}

// raceStore records the tasks that firing writes create, and between some passes' read of the
// due schedules and their writes, pauses or replaces a schedule (hook).
type raceStore struct {
	task.Store
	clock *raceClock
	hook  func()
	mu    sync.Mutex
	made  []raceMade
}

func (s *raceStore) DueSchedules(ctx context.Context, lambda string, before time.Time, limit int) ([]task.Schedule, error) {
	due, err := s.Store.DueSchedules(ctx, lambda, before, limit)
	if len(due) > 0 && s.hook != nil {
		s.hook()
	}
	return due, err
}

func (s *raceStore) FireSchedule(ctx context.Context, sc task.Schedule, prev int64, tasks []task.Task) ([]bool, error) {
	began := s.clock.Now()
	created, err := s.Store.FireSchedule(ctx, sc, prev, tasks)
	for i, t := range tasks {
		if err == nil && created[i] {
			s.record(t, began)
		}
	}
	return created, err
}

func (s *raceStore) Create(ctx context.Context, t task.Task) error {
	began := s.clock.Now()
	err := s.Store.Create(ctx, t)
	if err == nil {
		s.record(t, began)
	}
	return err
}

func (s *raceStore) record(t task.Task, began time.Time) {
	var p struct{ Inc int }
	_ = json.Unmarshal(t.Payload, &p)
	s.mu.Lock()
	s.made = append(s.made, raceMade{id: t.ID, inc: p.Inc, fire: t.RunAt, began: began})
	s.mu.Unlock()
}

func scheduleRace(t *testing.T, base task.Store) {
	ctx := t.Context()
	l := task.Lambda{Name: "report"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	lead := cfg.PollInterval // the frontend sends ahead: passes fire up to a poll interval early
	clock := &raceClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := &raceStore{Store: base, clock: clock}
	queue := memqueue.New()
	api := frontend.New(base, frontend.Config{Lambdas: task.FixedCatalog{l}, Task: cfg, Now: clock.Now, Queue: queue})
	firings := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{l}, Task: cfg, Now: clock.Now, Queue: queue})
	var conses []*consumer.Consumer
	for range 3 {
		conses = append(conses, consumer.New(store, queue, consumer.Config{Lambdas: task.FixedCatalog{l}, Task: cfg, Now: clock.Now, Scheduler: firings}))
	}

	ids := []string{"a", "b"}
	var mu sync.Mutex // the schedules' state below, and the API calls that change it
	events := map[string][]raceEvent{}
	incs := map[string]int{}
	tokens := map[string]map[int]string{} // each incarnation's token, for its firings' ids
	paused := map[string]bool{}
	create := func(id string) {
		incs[id]++
		at := clock.advance(time.Nanosecond)
		spec := task.ScheduleSpec{ID: id, Rate: "1s", CatchUp: task.CatchUpAll, Task: task.Template{Payload: fmt.Appendf(nil, `{"inc":%d}`, incs[id])}}
		sc, _, err := api.CreateSchedule(ctx, "report", spec)
		if err != nil {
			t.Error(err)
		}
		if tokens[id] == nil {
			tokens[id] = map[int]string{}
		}
		tokens[id][incs[id]] = sc.Incarnation
		events[id] = append(events[id], raceEvent{inc: incs[id], at: at})
	}
	stop := func(id string, change func() error) {
		if err := change(); err != nil {
			t.Error(err)
		}
		events[id] = append(events[id], raceEvent{inc: incs[id], stop: true, at: clock.advance(time.Nanosecond)})
	}
	for _, id := range ids {
		create(id)
	}
	// A pass of the first consumer that finds schedules due, alone and so the first to, pauses
	// one, or deletes it and creates it again, after its read and before its write.
	hooks := 0
	var hooking atomic.Bool
	store.hook = func() {
		if !hooking.Load() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		hooks++
		id := ids[hooks%2]
		if paused[id] {
			return
		}
		if hooks/2%2 == 0 {
			stop(id, func() error { _, err := api.PauseSchedule(ctx, "report", id); return err })
			paused[id] = true
			return
		}
		stop(id, func() error { return api.DeleteSchedule(ctx, "report", id) })
		create(id)
	}
	type round struct{ at, done time.Time } // a round of passes: its time, and the clock after it
	var done []round
	between := 0 // stops between rounds, while the schedule has a firing made ahead
	rounds := func(n int) {
		for range n {
			at := clock.advance(250 * time.Millisecond)
			hooking.Store(true)
			if _, err := conses[0].Sweep(ctx); err != nil {
				t.Error(err)
			}
			hooking.Store(false)
			var wg sync.WaitGroup
			for _, c := range conses {
				wg.Go(func() {
					if _, err := c.Sweep(ctx); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			mu.Lock()
			done = append(done, round{at: at, done: clock.Now()})
			// A quarter second past a whole second, the passes made the next second's firing
			// ahead: delete a schedule and create it again, or pause it, then.
			if past := at.Sub(at.Truncate(time.Second)); past >= 250*time.Millisecond && past < 500*time.Millisecond {
				between++
				if id := ids[between%2]; !paused[id] {
					if between/2%2 == 0 {
						stop(id, func() error { _, err := api.PauseSchedule(ctx, "report", id); return err })
						paused[id] = true
					} else {
						stop(id, func() error { return api.DeleteSchedule(ctx, "report", id) })
						create(id)
					}
				}
			}
			for _, id := range ids {
				if paused[id] && clock.Now().Sub(events[id][len(events[id])-1].at) >= 500*time.Millisecond {
					at := clock.advance(time.Nanosecond)
					if _, err := api.ResumeSchedule(ctx, "report", id); err != nil {
						t.Error(err)
					}
					events[id] = append(events[id], raceEvent{inc: incs[id], at: at})
					paused[id] = false
				}
			}
			mu.Unlock()
		}
	}
	rounds(24)
	// The last active time: every schedule active, started more than a lead after its last stop
	// (so that no task made ahead before that stop holds one of its firings), and fired for 2 s.
	mu.Lock()
	store.hook = func() {}
	clock.advance(2 * lead)
	for _, id := range ids {
		if paused[id] {
			at := clock.advance(time.Nanosecond)
			if _, err := api.ResumeSchedule(ctx, "report", id); err != nil {
				t.Fatal(err)
			}
			events[id] = append(events[id], raceEvent{inc: incs[id], at: at})
			paused[id] = false
		}
	}
	mu.Unlock()
	rounds(8)
	end := clock.Now()

	stops := 0
	for _, id := range ids {
		for _, e := range events[id] {
			if e.stop {
				stops++
			}
		}
	}
	if stops < 4 {
		t.Fatalf("only %d pauses and deletes happened between a pass's read and its write: the race did not run", stops)
	}
	seen := map[string]bool{}
	for _, m := range store.made {
		if seen[m.id] {
			t.Errorf("task %s created twice", m.id)
		}
		seen[m.id] = true
		id := m.id[:1]
		// The incarnation was active when the write began: its last event by then is a start.
		var last *raceEvent
		for i, e := range events[id] {
			if e.inc == m.inc && !e.at.After(m.began) {
				last = &events[id][i]
			}
		}
		if last == nil || last.stop {
			t.Errorf("task %s (incarnation %d, fire time %s) created by a write that began at %s, after a pause or delete of it was answered; its events: %+v",
				m.id, m.inc, m.fire.Format(time.TimeOnly), m.began.Format(time.TimeOnly+".000000000"), events[id])
			continue
		}
		// Its fire time is of an active time of the incarnation, at most a lead after its end; past
		// the end, the pause or delete cancelled it before it was answered.
		inside, tail := false, time.Time{}
		for i, e := range events[id] {
			if e.inc != m.inc || e.stop || !m.fire.After(e.at) {
				continue
			}
			if i+1 == len(events[id]) || !m.fire.After(events[id][i+1].at) {
				inside = true
			} else if !m.fire.After(events[id][i+1].at.Add(lead)) {
				tail = events[id][i+1].at
			}
		}
		ok := inside || !tail.IsZero()
		if !inside && !tail.IsZero() {
			if tk, err := base.Get(ctx, "report", m.id); err != nil || tk.Status != task.StatusCancelled {
				t.Errorf("task %s (incarnation %d) fires at %s, after the stop answered at %s, and was not cancelled: %s, %v",
					m.id, m.inc, m.fire.Format(time.TimeOnly), tail.Format(time.TimeOnly+".000000000"), tk.Status, err)
			}
		}
		if !ok {
			t.Errorf("task %s (incarnation %d) fires at %s, outside the active times of its incarnation: %+v", m.id, m.inc, m.fire.Format(time.TimeOnly), events[id])
		}
	}
	// Every firing of every active time is made, by its incarnation: those up to a lead after the
	// last round of passes that began after the start and ended before the stop (a pass that read
	// the schedule before a stop makes nothing), and before the stop.
	checked := 0
	for _, id := range ids {
		evs := events[id]
		for i, e := range evs {
			if e.stop {
				continue
			}
			until := end.Add(time.Nanosecond)
			if i+1 < len(evs) {
				until = evs[i+1].at
			}
			var last *round
			for j, r := range done {
				if r.at.After(e.at) && r.done.Before(until) {
					last = &done[j]
				}
			}
			if last == nil {
				continue
			}
			upTo := last.at.Add(lead)
			if upTo.After(until) {
				upTo = until
			}
			for at := e.at.Truncate(time.Second).Add(time.Second); at.Before(upTo); at = at.Add(time.Second) {
				checked++
				tk, err := base.Get(ctx, "report", task.FireID(id, tokens[id][e.inc], at))
				if err != nil {
					t.Errorf("the firing of %s (incarnation %d) at %s: %v", id, e.inc, at.Format(time.TimeOnly), err)
					continue
				}
				if want := fmt.Sprintf(`{"inc":%d}`, e.inc); string(tk.Payload) != want {
					t.Errorf("the firing of %s at %s has payload %s, want %s", id, at.Format(time.TimeOnly), tk.Payload, want)
				}
			}
		}
	}
	if checked < 16 {
		t.Errorf("only %d firings checked", checked)
	}
	// Nothing else created a task.
	for cursor := ""; ; {
		list, next, err := base.List(ctx, task.ListParams{Lambda: "report", Limit: task.MaxListLimit, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range list {
			if !seen[tk.ID] {
				t.Errorf("task %s was created outside a firing write", tk.ID)
			}
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	t.Logf("%d tasks, %d pauses and deletes", len(store.made), stops)
}
