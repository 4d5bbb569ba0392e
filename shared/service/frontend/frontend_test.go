package frontend_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

var ctx = context.Background()

// t0 is the service's clock at the start of every test, in a zone other than UTC: the service
// must store UTC times whatever the zone of its clock.
var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.FixedZone("CET", 3600))

// fixture is a service over the embedded store with a clock the test moves, and two lambdas:
// "echo" with the defaults, and "mail" with its own priorities and max attempts.
type fixture struct {
	t       *testing.T
	store   *sqlitestore.Store
	svc     *frontend.Service
	now     time.Time
	notices int // calls of Notify
}

func newFixture(t *testing.T, c task.Config) *fixture {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := &fixture{t: t, store: store, now: t0}
	f.svc = frontend.New(store, frontend.Config{
		// Not in name order: Lambdas lists them sorted.
		Lambdas: task.FixedCatalog{
			task.Lambda{Name: "mail", Priorities: []string{"urgent", "bulk"}, MaxAttempts: 7}.WithDefaults(),
			task.Lambda{Name: "echo"}.WithDefaults(),
		},
		Task:   c,
		Now:    func() time.Time { return f.now },
		Notify: func() { f.notices++ },
	})
	return f
}

func (f *fixture) schedule(lambda string, spec task.Spec) task.Task {
	f.t.Helper()
	tk, created, err := f.svc.Schedule(ctx, lambda, spec)
	if err != nil || !created {
		f.t.Fatalf("schedule %s %+v: created %v, err %v", lambda, spec, created, err)
	}
	return tk
}

// stored returns the stored task, failing the test if there is none.
func (f *fixture) stored(lambda, id string) task.Task {
	f.t.Helper()
	tk, err := f.store.Get(ctx, lambda, id)
	if err != nil {
		f.t.Fatalf("stored %s/%s: %v", lambda, id, err)
	}
	return tk
}

// absent fails the test if lambda has a task with id.
func (f *fixture) absent(lambda, id string) {
	f.t.Helper()
	if tk, err := f.store.Get(ctx, lambda, id); !errors.Is(err, task.ErrNotFound) {
		f.t.Fatalf("task %s/%s: stored as %s (err %v), want none", lambda, id, tk.Status, err)
	}
}

// total returns how many tasks the lambda has, whatever their status.
func (f *fixture) total(lambda string) int {
	f.t.Helper()
	counts, err := f.store.Counts(ctx, lambda)
	if err != nil {
		f.t.Fatal(err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func ptr[T any](v T) *T { return &v }

// sameTask compares what a client sees of two tasks, times as instants, and the fingerprint of
// their request. (A run_at or deadline comes back from Schedule in the zone the client wrote it
// in, and from the store in UTC.)
func sameTask(a, b task.Task) bool {
	aj, _ := json.Marshal(inUTC(a))
	bj, _ := json.Marshal(inUTC(b))
	return string(aj) == string(bj) && a.Spec == b.Spec
}

func inUTC(t task.Task) task.Task {
	utc := func(p *time.Time) *time.Time {
		if p == nil {
			return nil
		}
		return ptr(p.UTC())
	}
	t.RunAt, t.CreatedAt, t.UpdatedAt = t.RunAt.UTC(), t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	t.Deadline, t.NextTriggerAt = utc(t.Deadline), utc(t.NextTriggerAt)
	return t
}

// TestScheduleDefaults: a request with no fields gets an id, the lambda's middle priority, its
// max attempts (the config's when the lambda sets none), runs now, and is stored as returned.
func TestScheduleDefaults(t *testing.T) {
	f := newFixture(t, task.Config{MaxAttempts: 4})
	now := t0.UTC()
	for _, tc := range []struct {
		lambda, priority string
		maxAttempts      int
	}{
		{"echo", "normal", 4}, // the config's
		{"mail", "bulk", 7},   // the lambda's own: of two priorities, the second is the middle
	} {
		tk := f.schedule(tc.lambda, task.Spec{})
		if tk.ID == "" || tk.Lambda != tc.lambda || tk.Priority != tc.priority || tk.MaxAttempts != tc.maxAttempts {
			t.Errorf("%s: id %q, lambda %s, priority %s, max attempts %d; want an id, %s, %s, %d",
				tc.lambda, tk.ID, tk.Lambda, tk.Priority, tk.MaxAttempts, tc.lambda, tc.priority, tc.maxAttempts)
		}
		if tk.Status != task.StatusNew || tk.Attempts != 0 || tk.Version != 1 || tk.Collection != "" || tk.Payload != nil || tk.Deadline != nil {
			t.Errorf("%s: %+v; want new, untried, version 1, no collection, payload or deadline", tc.lambda, tk)
		}
		if !tk.RunAt.Equal(now) || tk.RunAt.Location() != time.UTC || tk.NextTriggerAt == nil || !tk.NextTriggerAt.Equal(now) ||
			!tk.CreatedAt.Equal(now) || !tk.UpdatedAt.Equal(now) {
			t.Errorf("%s: run at %s, next trigger %v, created %s, updated %s; want all %s in UTC",
				tc.lambda, tk.RunAt, tk.NextTriggerAt, tk.CreatedAt, tk.UpdatedAt, now)
		}
		if got := f.stored(tc.lambda, tk.ID); !sameTask(got, tk) {
			t.Errorf("%s: stored %+v, returned %+v", tc.lambda, got, tk)
		}
	}
	if f.notices != 2 {
		t.Fatalf("Notify called %d times for 2 tasks created, want 2", f.notices)
	}
}

// TestScheduleFields: what a request sets is what is stored; the payload is stored compacted.
func TestScheduleFields(t *testing.T) {
	f := newFixture(t, task.Config{})
	deadline := t0.Add(time.Hour)
	tk := f.schedule("mail", task.Spec{
		ID: "welcome:42", Payload: json.RawMessage(`{ "to" : "a@b.c" }`), Priority: "urgent",
		Collection: "signup", MaxAttempts: 2, Deadline: &deadline,
	})
	if tk.ID != "welcome:42" || string(tk.Payload) != `{"to":"a@b.c"}` || tk.Priority != "urgent" ||
		tk.Collection != "signup" || tk.MaxAttempts != 2 || tk.Deadline == nil || !tk.Deadline.Equal(deadline) {
		t.Fatalf("scheduled %+v", tk)
	}
	if got := f.stored("mail", "welcome:42"); !sameTask(got, tk) {
		t.Fatalf("stored %+v, returned %+v", got, tk)
	}
}

// TestScheduleRunTime: a delay or a future run_at sets the run time and the first trigger; a
// run_at in the past means now.
func TestScheduleRunTime(t *testing.T) {
	f := newFixture(t, task.Config{})
	for _, tc := range []struct {
		name string
		spec task.Spec
		want time.Time
	}{
		{"delay", task.Spec{Delay: ptr(90 * time.Second)}, t0.Add(90 * time.Second)},
		{"zero delay", task.Spec{Delay: ptr(time.Duration(0))}, t0},
		{"the longest delay", task.Spec{Delay: ptr(task.MaxDelay)}, t0.Add(task.MaxDelay)},
		{"run_at ahead", task.Spec{RunAt: ptr(t0.Add(time.Hour))}, t0.Add(time.Hour)},
		{"run_at past", task.Spec{RunAt: ptr(t0.Add(-time.Hour))}, t0},
	} {
		tk := f.schedule("echo", tc.spec)
		stored := f.stored("echo", tk.ID)
		for _, got := range []task.Task{tk, stored} {
			if !got.RunAt.Equal(tc.want) || got.NextTriggerAt == nil || !got.NextTriggerAt.Equal(tc.want) {
				t.Errorf("%s: run at %s, next trigger %v; want both %s", tc.name, got.RunAt, got.NextTriggerAt, tc.want)
			}
		}
	}
}

// TestScheduleRejected: a request that is wrong anywhere fails with the error's kind, stores
// nothing and notifies nobody.
func TestScheduleRejected(t *testing.T) {
	f := newFixture(t, task.Config{PayloadLimit: 64})
	if f.svc.PayloadLimit() != 64 {
		t.Fatalf("PayloadLimit %d, want the configured 64", f.svc.PayloadLimit())
	}
	for _, tc := range []struct {
		name   string
		lambda string
		spec   task.Spec
		kind   error
		msg    string
	}{
		{"unknown lambda", "nope", task.Spec{ID: "x"}, task.ErrNotFound, `lambda "nope" is not registered`},
		{"bad id", "echo", task.Spec{ID: "-x"}, task.ErrInvalid, "id"},
		{"long id", "echo", task.Spec{ID: strings.Repeat("x", 129)}, task.ErrInvalid, "id"},
		{"bad collection", "echo", task.Spec{ID: "x", Collection: "a b"}, task.ErrInvalid, "collection"},
		{"unknown priority", "echo", task.Spec{ID: "x", Priority: "urgent"}, task.ErrInvalid, "priority"},
		{"another lambda's priority", "mail", task.Spec{ID: "x", Priority: "normal"}, task.ErrInvalid, "priority"},
		{"negative max attempts", "echo", task.Spec{ID: "x", MaxAttempts: -1}, task.ErrInvalid, "max_attempts"},
		{"too many attempts", "echo", task.Spec{ID: "x", MaxAttempts: task.MaxAttemptsLimit + 1}, task.ErrInvalid, "max_attempts"},
		{"run_at and delay", "echo", task.Spec{ID: "x", RunAt: ptr(t0.Add(time.Hour)), Delay: ptr(time.Hour)}, task.ErrInvalid, "not both"},
		{"negative delay", "echo", task.Spec{ID: "x", Delay: ptr(-time.Second)}, task.ErrInvalid, "delay"},
		{"delay too long", "echo", task.Spec{ID: "x", Delay: ptr(task.MaxDelay + time.Second)}, task.ErrInvalid, "delay"},
		{"run_at too far", "echo", task.Spec{ID: "x", RunAt: ptr(t0.Add(task.MaxDelay + time.Second))}, task.ErrInvalid, "run_at"},
		{"deadline before run", "echo", task.Spec{ID: "x", Delay: ptr(time.Hour), Deadline: ptr(t0.Add(time.Minute))}, task.ErrInvalid, "deadline"},
		{"deadline at run", "echo", task.Spec{ID: "x", Deadline: ptr(t0)}, task.ErrInvalid, "deadline"},
		{"deadline too far", "echo", task.Spec{ID: "x", Deadline: ptr(t0.Add(task.MaxDeadline + time.Second))}, task.ErrInvalid, "deadline"},
		// An upstream that does not exist is refused as invalid, which the HTTP API answers 422.
		{"after a missing task", "echo", task.Spec{ID: "x", After: []task.Ref{{ID: "y"}}}, task.ErrInvalid, "echo/y does not exist"},
		{"after an unknown lambda's task", "echo", task.Spec{ID: "x", After: []task.Ref{{Lambda: "nope", ID: "y"}}}, task.ErrInvalid, "nope/y does not exist"},
		{"after itself", "echo", task.Spec{ID: "x", After: []task.Ref{{ID: "x"}}}, task.ErrInvalid, "itself"},
		{"payload not JSON", "echo", task.Spec{ID: "x", Payload: json.RawMessage(`{"a":`)}, task.ErrInvalid, "payload"},
		{"payload over the limit", "echo", task.Spec{ID: "x", Payload: json.RawMessage(`"` + strings.Repeat("x", 63) + `"`)}, task.ErrTooLarge, "limit is 64"},
	} {
		tk, created, err := f.svc.Schedule(ctx, tc.lambda, tc.spec)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want %v naming %q", tc.name, err, tc.kind, tc.msg)
		}
		if created || tk.ID != "" {
			t.Errorf("%s: returned %+v, created %v; want nothing", tc.name, tk, created)
		}
	}
	if n := f.total("echo") + f.total("mail") + f.total("nope"); n != 0 {
		t.Fatalf("%d tasks stored by rejected requests", n)
	}
	if f.notices != 0 {
		t.Fatalf("Notify called %d times for rejected requests", f.notices)
	}
	// At the limit is allowed.
	f.schedule("echo", task.Spec{ID: "x", Payload: json.RawMessage(`"` + strings.Repeat("x", 62) + `"`)})
}

// TestScheduleIdempotent: the same request again returns the stored task, not created, even
// later (a delay is compared as written, not as the run time it gave); a different request with
// the id fails with ErrConflict and changes nothing. Ids are per lambda.
func TestScheduleIdempotent(t *testing.T) {
	f := newFixture(t, task.Config{})
	spec := task.Spec{ID: "once", Payload: json.RawMessage(`{"n":1}`), Delay: ptr(time.Hour), Collection: "c"}
	first := f.schedule("echo", spec)

	f.now = t0.Add(time.Minute)
	// The same payload written differently is the same request.
	again := spec
	again.Payload = json.RawMessage(`{ "n": 1 }`)
	tk, created, err := f.svc.Schedule(ctx, "echo", again)
	if err != nil || created || !sameTask(tk, first) {
		t.Fatalf("replay: created %v, err %v, task %+v; want the first task %+v", created, err, tk, first)
	}
	for name, change := range map[string]func(*task.Spec){
		"payload":      func(s *task.Spec) { s.Payload = json.RawMessage(`{"n":2}`) },
		"no payload":   func(s *task.Spec) { s.Payload = nil },
		"delay":        func(s *task.Spec) { s.Delay = ptr(2 * time.Hour) },
		"run_at":       func(s *task.Spec) { s.Delay, s.RunAt = nil, ptr(first.RunAt) },
		"priority":     func(s *task.Spec) { s.Priority = "high" },
		"collection":   func(s *task.Spec) { s.Collection = "d" },
		"max attempts": func(s *task.Spec) { s.MaxAttempts = 9 },
		"deadline":     func(s *task.Spec) { s.Deadline = ptr(t0.Add(2 * time.Hour)) },
	} {
		other := spec
		change(&other)
		tk, created, err := f.svc.Schedule(ctx, "echo", other)
		if !errors.Is(err, task.ErrConflict) || created || tk.ID != "" {
			t.Errorf("%s changed: created %v, err %v, task %+v; want ErrConflict", name, created, err, tk)
		}
	}
	if got := f.stored("echo", "once"); !sameTask(got, first) || f.total("echo") != 1 {
		t.Fatalf("stored %+v and %d tasks, want the first task alone", got, f.total("echo"))
	}
	if f.notices != 1 {
		t.Fatalf("Notify called %d times, want once, for the one task created", f.notices)
	}
	// The same id on another lambda is another task.
	if tk := f.schedule("mail", task.Spec{ID: "once"}); tk.Lambda != "mail" {
		t.Fatalf("scheduled %+v", tk)
	}
}

// TestScheduleBatch: a batch creates all its tasks at once, with one notice.
func TestScheduleBatch(t *testing.T) {
	f := newFixture(t, task.Config{})
	specs := []task.Spec{
		{ID: "b1", Payload: json.RawMessage(`{"n":1}`)},
		{ID: "b2", Delay: ptr(time.Hour), Priority: "low"},
		{},
	}
	tasks, created, err := f.svc.ScheduleBatch(ctx, "echo", specs)
	if err != nil || !created || len(tasks) != 3 {
		t.Fatalf("batch: created %v, err %v, %d tasks", created, err, len(tasks))
	}
	if tasks[0].ID != "b1" || tasks[1].ID != "b2" || tasks[2].ID == "" || tasks[1].Priority != "low" ||
		!tasks[1].RunAt.Equal(t0.Add(time.Hour)) || tasks[2].Priority != "normal" {
		t.Fatalf("batch tasks %+v", tasks)
	}
	for _, tk := range tasks {
		if got := f.stored("echo", tk.ID); !sameTask(got, tk) {
			t.Errorf("stored %+v, returned %+v", got, tk)
		}
	}
	if f.notices != 1 {
		t.Fatalf("Notify called %d times for one batch, want once", f.notices)
	}

	// The same batch again, later: a replay. The third task had no id, so it cannot be one.
	f.now = t0.Add(time.Minute)
	replay, created, err := f.svc.ScheduleBatch(ctx, "echo", specs[:2])
	if err != nil || created || len(replay) != 2 || !sameTask(replay[0], tasks[0]) || !sameTask(replay[1], tasks[1]) {
		t.Fatalf("replay: created %v, err %v, tasks %+v", created, err, replay)
	}
	if f.total("echo") != 3 || f.notices != 1 {
		t.Fatalf("after the replay: %d tasks, %d notices; want 3 and 1", f.total("echo"), f.notices)
	}
}

// TestScheduleBatchAllOrNothing: a batch that is wrong anywhere, or conflicts with stored tasks,
// creates none of its tasks, and its error names the task.
func TestScheduleBatchAllOrNothing(t *testing.T) {
	f := newFixture(t, task.Config{})
	f.schedule("echo", task.Spec{ID: "taken", Payload: json.RawMessage(`{"n":1}`)})
	f.notices = 0
	many := make([]task.Spec, task.MaxBatch+1)
	for _, tc := range []struct {
		name   string
		lambda string
		specs  []task.Spec
		kind   error
		msg    string
	}{
		{"unknown lambda", "nope", []task.Spec{{ID: "n1"}}, task.ErrNotFound, "nope"},
		{"empty", "echo", nil, task.ErrInvalid, fmt.Sprintf("1 to %d", task.MaxBatch)},
		{"too many", "echo", many, task.ErrInvalid, fmt.Sprintf("1 to %d", task.MaxBatch)},
		{"invalid task", "echo", []task.Spec{{ID: "n1"}, {ID: "n2", Priority: "urgent"}}, task.ErrInvalid, "tasks[1]"},
		{"payload over the limit", "echo", []task.Spec{{ID: "n1"}, {ID: "n2", Payload: json.RawMessage(`"` + strings.Repeat("x", task.DefaultPayloadLimit) + `"`)}}, task.ErrTooLarge, "tasks[1]"},
		{"after a missing task", "echo", []task.Spec{{ID: "n1"}, {ID: "n2", After: []task.Ref{{ID: "n1"}, {ID: "gone"}}}}, task.ErrInvalid, "echo/gone does not exist"},
		{"a cycle", "echo", []task.Spec{{ID: "n1", After: []task.Ref{{ID: "n3"}}}, {ID: "n2", After: []task.Ref{{ID: "n1"}}}, {ID: "n3", After: []task.Ref{{ID: "n2"}}}}, task.ErrInvalid, "cycle"},
		{"an id twice", "echo", []task.Spec{{ID: "n1"}, {ID: "n1"}}, task.ErrInvalid, "twice"},
		{"taken id, different request", "echo", []task.Spec{{ID: "taken", Payload: json.RawMessage(`{"n":2}`)}}, task.ErrConflict, "tasks[0]"},
		{"new beside taken", "echo", []task.Spec{{ID: "n1"}, {ID: "taken", Payload: json.RawMessage(`{"n":1}`)}}, task.ErrConflict, "n1"},
	} {
		tasks, created, err := f.svc.ScheduleBatch(ctx, tc.lambda, tc.specs)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want %v naming %q", tc.name, err, tc.kind, tc.msg)
		}
		if created || tasks != nil {
			t.Errorf("%s: returned %d tasks, created %v; want none", tc.name, len(tasks), created)
		}
	}
	f.absent("echo", "n1")
	f.absent("echo", "n2")
	if f.total("echo") != 1 || f.notices != 0 {
		t.Fatalf("after rejected batches: %d tasks, %d notices; want the taken task alone and none", f.total("echo"), f.notices)
	}
	if got := f.stored("echo", "taken"); string(got.Payload) != `{"n":1}` || got.Version != 1 {
		t.Fatalf("taken task changed: %+v", got)
	}
}

// TestGet: a task of a registered lambda, or ErrNotFound naming what is missing.
func TestGet(t *testing.T) {
	f := newFixture(t, task.Config{})
	want := f.schedule("echo", task.Spec{ID: "a"})
	if got, err := f.svc.Get(ctx, "echo", "a"); err != nil || !sameTask(got, want) {
		t.Fatalf("get: %+v, %v; want %+v", got, err, want)
	}
	for _, tc := range []struct{ lambda, id, msg string }{
		{"echo", "b", `task "b" of lambda echo not found`},
		{"mail", "a", `task "a" of lambda mail not found`},
		{"nope", "a", `lambda "nope" is not registered; the registered ones: echo, mail`},
	} {
		if _, err := f.svc.Get(ctx, tc.lambda, tc.id); !errors.Is(err, task.ErrNotFound) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("get %s/%s: %v, want ErrNotFound naming %q", tc.lambda, tc.id, err, tc.msg)
		}
	}
}

// TestUnknownLambdaNamesRegistered: the error of a lambda not registered names the registered
// ones by name, the first 20 of them and how many more; or says that there is none.
func TestUnknownLambdaNamesRegistered(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var many task.FixedCatalog
	for i := range 25 {
		many = append(many, task.Lambda{Name: fmt.Sprintf("l%02d", 24-i)}.WithDefaults())
	}
	var first20 []string
	for i := range 20 {
		first20 = append(first20, fmt.Sprintf("l%02d", i))
	}
	for _, tc := range []struct {
		catalog task.FixedCatalog
		want    string
	}{
		{many, `lambda "nope" is not registered; the registered ones: ` + strings.Join(first20, ", ") + " and 5 more"},
		{nil, `lambda "nope" is not registered; no lambda is registered`},
	} {
		svc := frontend.New(store, frontend.Config{Lambdas: tc.catalog})
		if _, _, err := svc.Schedule(ctx, "nope", task.Spec{}); !errors.Is(err, task.ErrNotFound) || err.Error() != tc.want {
			t.Errorf("schedule of an unknown lambda: %v\nwant %s", err, tc.want)
		}
	}
}

// TestList: filters, pages and the checks of the parameters.
func TestList(t *testing.T) {
	f := newFixture(t, task.Config{})
	var all []string
	for i := range 5 {
		id := fmt.Sprintf("t%d", i)
		collection := "even"
		if i%2 == 1 {
			collection = "odd"
		}
		f.schedule("echo", task.Spec{ID: id, Collection: collection})
		all = append(all, id)
	}
	f.schedule("mail", task.Spec{ID: "other"})
	if _, err := f.svc.Cancel(ctx, "echo", "t4"); err != nil {
		t.Fatal(err)
	}
	ids := func(p task.ListParams) []string {
		t.Helper()
		var got []string
		for {
			tasks, next, err := f.svc.List(ctx, p)
			if err != nil {
				t.Fatalf("list %+v: %v", p, err)
			}
			for _, tk := range tasks {
				got = append(got, tk.ID)
			}
			if next == "" {
				return got
			}
			p.Cursor = next
		}
	}
	for _, tc := range []struct {
		name string
		p    task.ListParams
		want []string
	}{
		{"all, default page", task.ListParams{Lambda: "echo"}, all},
		{"pages of two", task.ListParams{Lambda: "echo", Limit: 2}, all},
		{"the largest page", task.ListParams{Lambda: "echo", Limit: task.MaxListLimit}, all},
		{"by status", task.ListParams{Lambda: "echo", Status: task.StatusNew}, all[:4]},
		{"by collection", task.ListParams{Lambda: "echo", Collection: "odd", Limit: 1}, []string{"t1", "t3"}},
		{"by both", task.ListParams{Lambda: "echo", Collection: "even", Status: task.StatusCancelled}, []string{"t4"}},
		{"none", task.ListParams{Lambda: "echo", Status: task.StatusSuccess}, nil},
		{"another lambda", task.ListParams{Lambda: "mail"}, []string{"other"}},
	} {
		if got := ids(tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("%s: listed %v, want %v", tc.name, got, tc.want)
		}
	}
	if tasks, next, err := f.svc.List(ctx, task.ListParams{Lambda: "echo", Limit: 2}); err != nil || len(tasks) != 2 || next == "" {
		t.Fatalf("first page of two: %d tasks, next %q, err %v", len(tasks), next, err)
	}
	for _, tc := range []struct {
		name string
		p    task.ListParams
		kind error
	}{
		{"unknown lambda", task.ListParams{Lambda: "nope"}, task.ErrNotFound},
		{"unknown status", task.ListParams{Lambda: "echo", Status: "lost"}, task.ErrInvalid},
		{"negative limit", task.ListParams{Lambda: "echo", Limit: -1}, task.ErrInvalid},
		{"limit over the max", task.ListParams{Lambda: "echo", Limit: task.MaxListLimit + 1}, task.ErrInvalid},
		{"bad cursor", task.ListParams{Lambda: "echo", Cursor: "zzz"}, task.ErrInvalid},
	} {
		if tasks, _, err := f.svc.List(ctx, tc.p); !errors.Is(err, tc.kind) || tasks != nil {
			t.Errorf("%s: %d tasks, error %v; want %v", tc.name, len(tasks), err, tc.kind)
		}
	}
}

// TestCancel: a waiting task ends cancelled, at once and for good; a running or finished one
// cannot be cancelled and is left as it is.
func TestCancel(t *testing.T) {
	cfg := task.Config{}.WithDefaults()
	f := newFixture(t, cfg)
	f.schedule("echo", task.Spec{ID: "waiting", Delay: ptr(time.Hour)})
	f.schedule("echo", task.Spec{ID: "running"})
	// Claim "running", as the consumer and a worker would.
	running := f.stored("echo", "running")
	for _, step := range []func(task.Task) (task.Task, error){
		func(tk task.Task) (task.Task, error) { return task.Enqueue(tk, t0, cfg) },
		func(tk task.Task) (task.Task, error) { return task.Claim(tk, "lease", t0, cfg) },
	} {
		next, err := step(running)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.store.Update(ctx, next, running.Version); err != nil {
			t.Fatal(err)
		}
		running = next
	}

	f.now = t0.Add(time.Minute)
	tk, err := f.svc.Cancel(ctx, "echo", "waiting")
	if err != nil || tk.Status != task.StatusCancelled || tk.NextTriggerAt != nil || !tk.UpdatedAt.Equal(f.now) {
		t.Fatalf("cancel: %+v, %v; want cancelled at %s with no next trigger", tk, err, f.now.UTC())
	}
	if got := f.stored("echo", "waiting"); !sameTask(got, tk) {
		t.Fatalf("stored %+v, returned %+v", got, tk)
	}
	// A cancel sent again (a retry whose answer was lost) answers the cancelled task, unwritten.
	if again, err := f.svc.Cancel(ctx, "echo", "waiting"); err != nil || !sameTask(again, tk) {
		t.Fatalf("cancel of a cancelled task: %+v, %v; want it as it stands, %+v", again, err, tk)
	}
	for _, tc := range []struct {
		lambda, id string
		kind       error
	}{
		{"echo", "missing", task.ErrNotFound},
		{"nope", "waiting", task.ErrNotFound},
	} {
		if _, err := f.svc.Cancel(ctx, tc.lambda, tc.id); !errors.Is(err, tc.kind) {
			t.Errorf("cancel %s/%s: %v, want %v", tc.lambda, tc.id, err, tc.kind)
		}
	}
	// A running task is marked, and stays running under its lease; a second cancel answers it
	// again and writes nothing.
	for range 2 {
		marked, err := f.svc.Cancel(ctx, "echo", "running")
		if err != nil || !marked.CancelRequested || marked.Status != task.StatusProcessing || marked.Version != running.Version+1 {
			t.Fatalf("cancel of a running task: %s, requested %t, version %d, %v; want processing, marked, version %d",
				marked.Status, marked.CancelRequested, marked.Version, err, running.Version+1)
		}
	}
	if got := f.stored("echo", "running"); got.Status != task.StatusProcessing || got.Version != running.Version+1 || got.Lease != "lease" || !got.CancelRequested {
		t.Fatalf("running task after its cancel: %s, version %d, requested %t; want it processing under its lease, marked once", got.Status, got.Version, got.CancelRequested)
	}
	if got := f.stored("echo", "waiting"); got.Version != tk.Version {
		t.Fatalf("cancelled task changed by a second cancel: version %d, want %d", got.Version, tk.Version)
	}
}

// TestGates: a gate is set for a lambda or one collection, stored with the time it was set, and
// shown by Lambdas until it is opened again; a wrong gate changes nothing.
func TestGates(t *testing.T) {
	f := newFixture(t, task.Config{})
	lambdaGate, err := f.svc.SetGate(ctx, task.Gate{Lambda: "echo", Mode: task.GatePause})
	if err != nil || lambdaGate.Lambda != "echo" || lambdaGate.Collection != "" || lambdaGate.Mode != task.GatePause ||
		!lambdaGate.UpdatedAt.Equal(t0) || lambdaGate.UpdatedAt.Location() != time.UTC {
		t.Fatalf("pause echo: %+v, %v; want a pause set at %s in UTC", lambdaGate, err, t0.UTC())
	}
	f.now = t0.Add(time.Minute)
	collectionGate, err := f.svc.SetGate(ctx, task.Gate{Lambda: "echo", Collection: "bulk", Mode: task.GateDrop})
	if err != nil || collectionGate.Collection != "bulk" || collectionGate.Mode != task.GateDrop || !collectionGate.UpdatedAt.Equal(f.now) {
		t.Fatalf("drop echo/bulk: %+v, %v", collectionGate, err)
	}
	if f.notices != 2 {
		t.Fatalf("Notify called %d times for 2 gates, want 2", f.notices)
	}
	gates := func() []task.Gate {
		t.Helper()
		gs, err := f.store.Gates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(gs, func(a, b task.Gate) int { return strings.Compare(a.Collection, b.Collection) })
		return gs
	}
	sameGates := func(a, b []task.Gate) bool {
		return slices.EqualFunc(a, b, func(x, y task.Gate) bool {
			return x.Lambda == y.Lambda && x.Collection == y.Collection && x.Mode == y.Mode && x.UpdatedAt.Equal(y.UpdatedAt)
		})
	}
	if got := gates(); !sameGates(got, []task.Gate{lambdaGate, collectionGate}) {
		t.Fatalf("stored gates %+v", got)
	}

	for _, tc := range []struct {
		name string
		g    task.Gate
		kind error
	}{
		{"unknown lambda", task.Gate{Lambda: "nope", Mode: task.GatePause}, task.ErrNotFound},
		{"unknown mode", task.Gate{Lambda: "echo", Mode: "shut"}, task.ErrInvalid},
		{"no mode", task.Gate{Lambda: "echo"}, task.ErrInvalid},
		{"bad collection", task.Gate{Lambda: "echo", Collection: "a b", Mode: task.GateOpen}, task.ErrInvalid},
	} {
		if g, err := f.svc.SetGate(ctx, tc.g); !errors.Is(err, tc.kind) || g != (task.Gate{}) {
			t.Errorf("%s: %+v, %v; want %v", tc.name, g, err, tc.kind)
		}
	}
	if got := gates(); !sameGates(got, []task.Gate{lambdaGate, collectionGate}) || f.notices != 2 {
		t.Fatalf("after wrong gates: stored %+v, %d notices", got, f.notices)
	}

	// Opening removes the gate.
	if _, err := f.svc.SetGate(ctx, task.Gate{Lambda: "echo", Mode: task.GateOpen}); err != nil {
		t.Fatal(err)
	}
	if got := gates(); !sameGates(got, []task.Gate{collectionGate}) {
		t.Fatalf("after opening echo: stored %+v, want the collection's gate alone", got)
	}
}

// TestLambdas: every registered lambda, by name, with its priorities, the gates that are not
// open, and its tasks counted by status.
func TestLambdas(t *testing.T) {
	f := newFixture(t, task.Config{})
	infos, err := f.svc.Lambdas(ctx)
	if err != nil || len(infos) != 2 || infos[0].Name != "echo" || infos[1].Name != "mail" {
		t.Fatalf("lambdas: %+v, %v; want echo and mail", infos, err)
	}
	for _, info := range infos {
		if info.Gates == nil || len(info.Gates) != 0 || len(info.Counts) != 0 {
			t.Fatalf("%s without tasks or gates: %+v; want no gates (an empty list) and no counts", info.Name, info)
		}
	}
	if !slices.Equal(infos[0].Priorities, task.DefaultPriorities) || !slices.Equal(infos[1].Priorities, []string{"urgent", "bulk"}) {
		t.Fatalf("priorities %v and %v", infos[0].Priorities, infos[1].Priorities)
	}

	for _, id := range []string{"a", "b", "c"} {
		f.schedule("echo", task.Spec{ID: id})
	}
	if _, err := f.svc.Cancel(ctx, "echo", "c"); err != nil {
		t.Fatal(err)
	}
	f.schedule("mail", task.Spec{ID: "m"})
	gate, err := f.svc.SetGate(ctx, task.Gate{Lambda: "mail", Collection: "news", Mode: task.GatePause})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetGate(ctx, task.Gate{Lambda: "echo", Mode: task.GateOpen}); err != nil {
		t.Fatal(err)
	}
	infos, err = f.svc.Lambdas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	echo, mail := infos[0], infos[1]
	if len(echo.Counts) != 2 || echo.Counts[task.StatusNew] != 2 || echo.Counts[task.StatusCancelled] != 1 || len(echo.Gates) != 0 {
		t.Errorf("echo: %+v; want 2 new, 1 cancelled, no gate", echo)
	}
	if len(mail.Counts) != 1 || mail.Counts[task.StatusNew] != 1 || len(mail.Gates) != 1 ||
		mail.Gates[0].Collection != "news" || mail.Gates[0].Mode != task.GatePause || !mail.Gates[0].UpdatedAt.Equal(gate.UpdatedAt) {
		t.Errorf("mail: %+v; want 1 new, the pause of news", mail)
	}
}

// TestHeldBy: a task waiting to run behind a paused gate, of its lambda or of its collection,
// names the gate that holds it, in Get and in List alike. Once the gate opens, and for a task
// that waits for its upstreams, it names none; nor does a drop gate, which holds nothing.
func TestHeldBy(t *testing.T) {
	f := newFixture(t, task.Config{})
	f.schedule("echo", task.Spec{ID: "plain"})
	f.schedule("echo", task.Spec{ID: "bulk", Collection: "bulk"})
	f.schedule("echo", task.Spec{ID: "down", After: []task.Ref{{ID: "plain"}}})
	f.schedule("mail", task.Spec{ID: "other"})
	held := func() map[string]string {
		t.Helper()
		got := map[string]string{}
		for _, ref := range []task.Ref{{Lambda: "echo", ID: "plain"}, {Lambda: "echo", ID: "bulk"}, {Lambda: "echo", ID: "down"}, {Lambda: "mail", ID: "other"}} {
			tk, err := f.svc.Get(ctx, ref.Lambda, ref.ID)
			if err != nil {
				t.Fatal(err)
			}
			if g := tk.HeldBy; g != nil {
				got[ref.String()] = g.Lambda + " " + g.Collection + " " + g.Mode
			}
		}
		listed := map[string]string{}
		for _, lambda := range []string{"echo", "mail"} {
			tasks, _, err := f.svc.List(ctx, task.ListParams{Lambda: lambda})
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range tasks {
				if g := tk.HeldBy; g != nil {
					listed[tk.Ref().String()] = g.Lambda + " " + g.Collection + " " + g.Mode
				}
			}
		}
		if !maps.Equal(got, listed) {
			t.Errorf("Get says %v held, List %v", got, listed)
		}
		return got
	}
	if got := held(); len(got) != 0 {
		t.Fatalf("no gate set: %v held", got)
	}
	for _, step := range []struct {
		gate task.Gate
		want map[string]string
	}{
		{task.Gate{Lambda: "echo", Collection: "bulk", Mode: task.GatePause}, map[string]string{"echo/bulk": "echo bulk pause"}},
		{task.Gate{Lambda: "echo", Mode: task.GatePause}, map[string]string{"echo/bulk": "echo  pause", "echo/plain": "echo  pause"}},
		{task.Gate{Lambda: "echo", Mode: task.GateOpen}, map[string]string{"echo/bulk": "echo bulk pause"}},
		{task.Gate{Lambda: "echo", Collection: "bulk", Mode: task.GateDrop}, map[string]string{}},
	} {
		if _, err := f.svc.SetGate(ctx, step.gate); err != nil {
			t.Fatal(err)
		}
		if got := held(); !maps.Equal(got, step.want) {
			t.Errorf("after gate %+v: held %v, want %v", step.gate, got, step.want)
		}
	}
}
