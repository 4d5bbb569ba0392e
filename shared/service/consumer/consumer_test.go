package consumer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

type env struct {
	store *sqlitestore.Store
	queue *memqueue.Queue
	cons  *consumer.Consumer
	cfg   task.Config
	now   time.Time
	ls    map[string]task.Lambda
}

func newEnv(t *testing.T, quota int, names ...string) *env {
	return newEnvWith(t, options{cfg: task.Config{EnqueueQuota: quota}}, names...)
}

// options vary an env: its task config, and wrappers of the store and the queue the consumer
// sees (the env itself reads and writes the store unwrapped).
type options struct {
	cfg         task.Config
	maxEnqueued int                 // of every lambda
	backoff     *task.BackoffPolicy // of every lambda
	sweepAhead  time.Duration
	wrapStore   func(task.Store) task.Store
	wrapQueue   func(task.Queue) task.Queue
}

func newEnvWith(t *testing.T, o options, names ...string) *env {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := &env{store: store, queue: memqueue.New(), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), ls: map[string]task.Lambda{}}
	e.cfg = o.cfg.WithDefaults()
	var lambdas []task.Lambda
	for _, n := range names {
		l := task.Lambda{Name: n, MaxEnqueued: o.maxEnqueued, Backoff: o.backoff}.WithDefaults()
		e.ls[n] = l
		lambdas = append(lambdas, l)
	}
	var s task.Store = store
	if o.wrapStore != nil {
		s = o.wrapStore(s)
	}
	var q task.Queue = e.queue
	if o.wrapQueue != nil {
		q = o.wrapQueue(q)
	}
	e.cons = consumer.New(s, q, consumer.Config{
		Lambdas: task.FixedCatalog(lambdas), Task: e.cfg, Now: func() time.Time { return e.now }, Jitter: func() float64 { return 0 },
		SweepAhead: o.sweepAhead,
	})
	return e
}

func (e *env) schedule(t *testing.T, lambda string, s task.Spec) task.Task {
	t.Helper()
	tk, err := task.New(s, e.ls[lambda], e.now, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Create(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	return tk
}

func (e *env) sweep(t *testing.T) consumer.Stats {
	t.Helper()
	st, err := e.cons.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *env) received(t *testing.T, lambda, priority string) []string {
	t.Helper()
	var ids []string
	for {
		ds, err := e.queue.Receive(context.Background(), task.ReceiveParams{Lambda: lambda, Priority: priority, Max: 10, Visibility: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			return ids
		}
		for _, d := range ds {
			ids = append(ids, d.TaskID)
		}
	}
}

func (e *env) status(t *testing.T, lambda, id string) task.Status {
	tk, err := e.store.Get(context.Background(), lambda, id)
	if err != nil {
		t.Fatal(err)
	}
	return tk.Status
}

func TestEnqueuesDueTasksByPriorityUnderQuota(t *testing.T) {
	e := newEnv(t, 5, "flood", "quiet")
	for i := range 8 {
		e.schedule(t, "flood", task.Spec{ID: fmt.Sprintf("low-%d", i), Priority: "low"})
		e.schedule(t, "flood", task.Spec{ID: fmt.Sprintf("high-%d", i), Priority: "high"})
	}
	e.schedule(t, "quiet", task.Spec{ID: "q"})
	later := e.schedule(t, "quiet", task.Spec{ID: "later", Delay: ptr(time.Minute)})

	if st := e.sweep(t); st.Enqueued != 6 || !st.Full {
		t.Fatalf("first sweep enqueued %d (full %v), want 5 of flood (its quota, so full) and 1 of quiet", st.Enqueued, st.Full)
	}
	if got := e.received(t, "flood", "high"); len(got) != 5 {
		t.Fatalf("flood/high got %v, want the first 5 high tasks", got)
	}
	if got := e.received(t, "flood", "low"); len(got) != 0 {
		t.Fatalf("flood/low got %v before all high tasks were enqueued", got)
	}
	if got := e.received(t, "quiet", "normal"); len(got) != 1 || got[0] != "q" {
		t.Fatalf("quiet lambda got %v: the flood must not delay it", got)
	}
	e.sweep(t)
	if got := e.received(t, "flood", "high"); len(got) != 3 {
		t.Fatalf("second sweep: flood/high got %v, want the last 3", got)
	}
	if got := e.received(t, "flood", "low"); len(got) != 2 {
		t.Fatalf("second sweep: flood/low got %v, want 2 (quota left)", got)
	}
	if s := e.status(t, "quiet", later.ID); s != task.StatusNew {
		t.Fatalf("a task not yet due is %s", s)
	}
	e.now = e.now.Add(time.Minute)
	if st := e.sweep(t); st.Enqueued != 6 || !st.Full {
		t.Fatalf("third sweep enqueued %d (full %v), want 5 low tasks (full again) and later", st.Enqueued, st.Full)
	}
	if s := e.status(t, "quiet", later.ID); s != task.StatusEnqueued {
		t.Fatalf("once due the task is %s, want enqueued", s)
	}
	if st := e.sweep(t); st.Enqueued != 1 || st.Full {
		t.Fatalf("fourth sweep enqueued %d (full %v), want the last low task, under the quota", st.Enqueued, st.Full)
	}
}

func TestSweepAhead(t *testing.T) {
	e := newEnvWith(t, options{sweepAhead: 2 * time.Second}, "l")
	e.schedule(t, "l", task.Spec{ID: "now"})
	soon := e.schedule(t, "l", task.Spec{ID: "soon", Delay: ptr(time.Second)})
	later := e.schedule(t, "l", task.Spec{ID: "later", Delay: ptr(5 * time.Second)})
	if st := e.sweep(t); st.Enqueued != 2 {
		t.Fatalf("sweep enqueued %d, want now and soon (due within the sweep-ahead)", st.Enqueued)
	}
	got, err := e.store.Get(context.Background(), "l", soon.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != task.StatusEnqueued || got.NotBefore == nil || !got.NotBefore.Equal(soon.RunAt) {
		t.Fatalf("soon is %s, not before %v; want enqueued ahead, not claimable before its run time %v", got.Status, got.NotBefore, soon.RunAt)
	}
	// Its message is delayed to its run time: only the task due now can be received yet.
	if ids := e.received(t, "l", "normal"); !slices.Equal(ids, []string{"now"}) {
		t.Fatalf("received %v at once, want [now]", ids)
	}
	if s := e.status(t, "l", later.ID); s != task.StatusNew {
		t.Fatalf("a task due after the sweep-ahead is %s, want new", s)
	}
}

// Tasks swept ahead leave half the lambda's cap free for tasks due now.
func TestSweepAheadLeavesHalfTheCap(t *testing.T) {
	e := newEnvWith(t, options{sweepAhead: 2 * time.Second, maxEnqueued: 4}, "l")
	for i := range 3 {
		e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("soon-%d", i), Delay: ptr(time.Second)})
	}
	if st := e.sweep(t); st.Enqueued != 2 {
		t.Fatalf("sweep enqueued %d ahead, want 2: the other half of the cap (4) stays free", st.Enqueued)
	}
	e.schedule(t, "l", task.Spec{ID: "now"})
	if st := e.sweep(t); st.Enqueued != 1 || e.status(t, "l", "now") != task.StatusEnqueued {
		t.Fatalf("sweep enqueued %d, want the task due now", st.Enqueued)
	}
}

func TestTimeoutsReenqueueOrKill(t *testing.T) {
	e := newEnv(t, 100, "l")
	ctx := context.Background()
	lost := e.schedule(t, "l", task.Spec{ID: "lost-message"})
	e.schedule(t, "l", task.Spec{ID: "silent-worker", MaxAttempts: 1})
	e.schedule(t, "l", task.Spec{ID: "retry-me", MaxAttempts: 2})
	e.sweep(t)
	e.received(t, "l", "normal") // the messages are lost: nobody claims from the queue
	for _, id := range []string{"silent-worker", "retry-me"} {
		if _, err := task.Apply(ctx, e.store, "l", id, func(tk task.Task) (task.Task, error) {
			return task.Claim(tk, "lease", e.now, e.cfg)
		}); err != nil {
			t.Fatal(err)
		}
	}
	e.now = e.now.Add(e.cfg.EnqueueTimeout)
	st := e.sweep(t)
	if st.TimedOut != 2 || st.Dead != 1 {
		t.Fatalf("stats %+v, want 2 timed out, 1 of them dead", st)
	}
	if s := e.status(t, "l", "silent-worker"); s != task.StatusDead {
		t.Fatalf("silent worker, attempts used up: %s, want dead", s)
	}
	// Its retry is due within a backoff: enqueued at once, its message delayed to the retry.
	if s := e.status(t, "l", "retry-me"); s != task.StatusEnqueued {
		t.Fatalf("silent worker, attempts left: %s, want enqueued for its retry", s)
	}
	got := e.received(t, "l", "normal")
	if !slices.Contains(got, lost.ID) || slices.ContainsFunc(got, func(id string) bool { return id != lost.ID && id != "retry-me" }) {
		t.Fatalf("lost message: re-enqueued %v, want %s (and retry-me's once its backoff is over)", got, lost.ID)
	}
}

func TestGates(t *testing.T) {
	e := newEnv(t, 100, "l")
	ctx := context.Background()
	e.schedule(t, "l", task.Spec{ID: "a1", Collection: "a"})
	e.schedule(t, "l", task.Spec{ID: "b1", Collection: "b", Delay: ptr(time.Hour)})
	e.schedule(t, "l", task.Spec{ID: "c1", Collection: "c"})
	set := func(coll, mode string) {
		if err := e.store.SetGate(ctx, task.Gate{Lambda: "l", Collection: coll, Mode: mode}); err != nil {
			t.Fatal(err)
		}
	}
	set("a", task.GatePause)
	set("b", task.GateDrop)
	st := e.sweep(t)
	if st.Enqueued != 1 || st.Parked != 1 || st.Dropped != 0 {
		t.Fatalf("stats %+v, want c1 enqueued, a1 parked, b1 not yet due", st)
	}
	// A dropped collection's task ends as it comes due: its trigger is what finds it.
	e.now = e.now.Add(time.Hour)
	if st := e.sweep(t); st.Dropped != 1 || st.Parked != 0 {
		t.Fatalf("stats %+v, want b1 dropped once due, a1 left parked", st)
	}
	want := map[string]task.Status{"a1": task.StatusNew, "b1": task.StatusDropped, "c1": task.StatusEnqueued}
	for id, s := range want {
		if got := e.status(t, "l", id); got != s {
			t.Errorf("%s is %s, want %s", id, got, s)
		}
	}
	set("a", task.GateOpen)
	set("", task.GatePause)
	if st := e.sweep(t); st.Enqueued != 0 || st.Unparked != 0 {
		t.Fatalf("paused lambda: stats %+v, want nothing moved", st)
	}
	set("", task.GateOpen)
	if st := e.sweep(t); st.Unparked != 1 || st.Enqueued != 1 {
		t.Fatalf("reopened lambda: stats %+v, want a1 unparked and enqueued", st)
	}
}

// TestEnqueuesManyInDueOrder: a sweep writes its enqueues concurrently, yet each due task is
// enqueued once and the messages go out earliest first.
func TestEnqueuesManyInDueOrder(t *testing.T) {
	e := newEnv(t, 500, "bulk")
	var want []string
	for i := range 200 {
		// Due in 200..1 ms: the last one created is due first.
		tk := e.schedule(t, "bulk", task.Spec{ID: fmt.Sprintf("t%03d", i), RunAt: ptr(e.now.Add(time.Duration(200-i) * time.Millisecond))})
		want = append([]string{tk.ID}, want...)
	}
	e.now = e.now.Add(time.Second)
	if st := e.sweep(t); st.Enqueued != 200 {
		t.Fatalf("enqueued %d of 200", st.Enqueued)
	}
	if got := e.received(t, "bulk", "normal"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("messages %v, want them earliest first %v", got, want)
	}
	if st := e.sweep(t); st.Enqueued != 0 {
		t.Errorf("a second sweep enqueued %d again", st.Enqueued)
	}
}

func ptr[T any](v T) *T { return &v }
