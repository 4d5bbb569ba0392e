package consumer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// callCounter is a store that counts the consumer's reads of gates, due tasks and whether a lambda
// has any task triggered, and can set a gate just before a due read of waiting tasks answers (a
// gate closed mid-pass).
type callCounter struct {
	task.Store
	gates, due, triggered atomic.Int64

	mu       sync.Mutex
	gateOnce *task.Gate // set before the next due read of waiting tasks, once
}

func (s *callCounter) Gates(ctx context.Context) ([]task.Gate, error) {
	s.gates.Add(1)
	return s.Store.Gates(ctx)
}

func (s *callCounter) Triggered(ctx context.Context, lambda string) (bool, error) {
	s.triggered.Add(1)
	return s.Store.Triggered(ctx, lambda)
}

func (s *callCounter) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	s.due.Add(1)
	s.mu.Lock()
	g := s.gateOnce
	if g != nil && slices.Contains(p.Statuses, task.StatusNew) && !p.Parked {
		s.gateOnce = nil
	} else {
		g = nil
	}
	s.mu.Unlock()
	if g != nil {
		if err := s.SetGate(ctx, *g); err != nil {
			return nil, err
		}
	}
	return s.Store.Due(ctx, p)
}

func (s *callCounter) reset() { s.gates.Store(0); s.due.Store(0); s.triggered.Store(0) }

// idleReads is what one pass of an idle lambda with p priorities reads of the due index: its
// running, flow, parked and resend lanes, and each priority's waiting lane.
func idleReads(p int) int64 { return int64(4 + p) }

// TestIdleSweepReadsGatesOnce: a sweep of idle lambdas reads the gates once between them, and
// the lanes of a lambda with a task triggered (due later) once; no priority reads them again when
// it found nothing. The lambdas without a task triggered read no lane.
func TestIdleSweepReadsGatesOnce(t *testing.T) {
	s := &callCounter{}
	e := newEnvWith(t, options{wrapStore: func(inner task.Store) task.Store { s.Store = inner; return s }}, "a", "b", "c")
	e.schedule(t, "a", task.Spec{ID: "later", Delay: ptr(time.Hour)})
	if st := e.sweep(t); st.Seen != 0 {
		t.Fatalf("idle sweep: %+v", st)
	}
	if g, d, want := s.gates.Load(), s.due.Load(), idleReads(3); g != 1 || d != want {
		t.Errorf("idle sweep of 3 lambdas of 3 priorities, one with a task due later: %d gate reads, %d due reads; want 1 and %d", g, d, want)
	}
}

// TestUntriggeredLambdasReadNoLanes: as the consumer function runs over an idle environment,
// a lambda without a task triggered, whatever it ran before, costs one Triggered read and its
// schedules' reads: no lane of its due index, no gates, no look at its lanes ahead.
func TestUntriggeredLambdasReadNoLanes(t *testing.T) {
	e := newRealEnv(t, "a", "b", "c")
	// A finished task has no trigger: a lambda's history keeps it no busier.
	e.schedule(t, "a", task.Spec{ID: "done"})
	if _, err := task.Apply(t.Context(), e.store, "a", "done", func(tk task.Task) (task.Task, error) {
		return task.Cancel(tk, time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	rs := e.runIdle(t)
	if rs.Passes != 3 || rs.Looks != 3 || rs.Stopped != 3 || rs.Failed != 0 {
		t.Errorf("idle run: %+v; want a pass, a look and a stop per lambda", rs)
	}
	if g, d, tr := e.count.gates.Load(), e.count.due.Load(), e.count.triggered.Load(); g != 0 || d != 0 || tr != 3 {
		t.Errorf("idle run of 3 lambdas without a task triggered: %d gate reads, %d due reads, %d triggered reads; want 0, 0 and 3", g, d, tr)
	}
}

// TestRunSharesGates: passes that Run starts together share one read of the gates.
func TestRunSharesGates(t *testing.T) {
	s := &callCounter{}
	e := newEnvWith(t, options{wrapStore: func(inner task.Store) task.Store { s.Store = inner; return s }}, "a", "b", "c", "d")
	for _, l := range []string{"a", "b", "c", "d"} { // a task triggered: the passes read the gates
		e.schedule(t, l, task.Spec{ID: "later", Delay: ptr(time.Hour)})
	}
	rs := e.cons.Run(t.Context(), consumer.RunParams{Until: time.Now()}) // one pass each
	if rs.Passes != 4 || rs.Failed != 0 {
		t.Fatalf("run: %+v", rs)
	}
	if g := s.gates.Load(); g != 1 {
		t.Errorf("4 passes started together read the gates %d times, want once", g)
	}
}

// TestGateReadAgainAfterDueTasks: a priority that found due tasks reads the gates again before it
// moves them, so that a task scheduled after its gate closed sees that gate, even when the pass
// began before the gate changed.
func TestGateReadAgainAfterDueTasks(t *testing.T) {
	s := &callCounter{}
	e := newEnvWith(t, options{wrapStore: func(inner task.Store) task.Store { s.Store = inner; return s }}, "l")
	e.schedule(t, "l", task.Spec{ID: "now"})
	s.gateOnce = &task.Gate{Lambda: "l", Mode: task.GatePause, UpdatedAt: e.now}
	st := e.sweep(t)
	if st.Enqueued != 0 || e.status(t, "l", "now") != task.StatusNew {
		t.Errorf("a gate closed before the due read answered: %+v, task %s; want it held", st, e.status(t, "l", "now"))
	}
	if g := s.gates.Load(); g != 2 {
		t.Errorf("%d gate reads, want 2: the pass's and one after the tasks", g)
	}

	// Open again: the task goes, after one more read of the gates for its priority alone.
	if err := e.store.SetGate(t.Context(), task.Gate{Lambda: "l", Mode: task.GateOpen, UpdatedAt: e.now}); err != nil {
		t.Fatal(err)
	}
	s.reset()
	if st := e.sweep(t); st.Enqueued != 1 {
		t.Fatalf("gate open: %+v", st)
	}
	if g := s.gates.Load(); g != 2 {
		t.Errorf("a sweep that enqueued one task read the gates %d times, want 2", g)
	}
}

// realEnv is a consumer whose clock is the wall clock, as Run's schedule is.
type realEnv struct {
	store *sqlitestore.Store
	count *callCounter
	queue *memqueue.Queue
	cons  *consumer.Consumer
	ls    map[string]task.Lambda
}

func newRealEnv(t *testing.T, names ...string) *realEnv {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := &realEnv{store: store, count: &callCounter{Store: store}, queue: memqueue.New(), ls: map[string]task.Lambda{}}
	var lambdas []task.Lambda
	for _, n := range names {
		l := task.Lambda{Name: n}.WithDefaults()
		e.ls[n] = l
		lambdas = append(lambdas, l)
	}
	e.cons = consumer.New(e.count, e.queue, consumer.Config{Lambdas: task.FixedCatalog(lambdas), Jitter: func() float64 { return 0 }})
	return e
}

func (e *realEnv) schedule(t *testing.T, lambda string, s task.Spec) {
	t.Helper()
	tk, err := task.New(s, e.ls[lambda], time.Now(), task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Create(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
}

// work runs a worker of lambda until ctx ends: it takes each message, claims its task and ends it
// a success, as an executor would.
func (e *realEnv) work(ctx context.Context, lambda string) {
	cfg := task.Config{}.WithDefaults()
	for ctx.Err() == nil {
		ds, _ := e.queue.Receive(ctx, task.ReceiveParams{Lambda: lambda, Priority: "normal", Max: 10, Wait: 20 * time.Millisecond, Visibility: time.Hour})
		for _, d := range ds {
			lease := task.NewLease()
			_, _ = task.Apply(ctx, e.store, lambda, d.TaskID, func(t task.Task) (task.Task, error) { return task.Claim(t, lease, time.Now(), cfg) })
			_, _ = task.Apply(ctx, e.store, lambda, d.TaskID, func(t task.Task) (task.Task, error) {
				return task.Succeed(t, lease, nil, time.Now(), cfg)
			})
			_ = e.queue.Delete(ctx, d)
		}
	}
}

// runIdle runs the consumer as the function does: until a minute is nearly up, or every lambda
// is idle. The test's own deadline ends a consumer that never stops.
func (e *realEnv) runIdle(t *testing.T) consumer.RunStats {
	return e.cons.Run(t.Context(), consumer.RunParams{Interval: 20 * time.Millisecond, Until: time.Now().Add(time.Minute), StopWhenIdle: true})
}

// TestStopWhenIdle: with nothing due before the minute is up, each lambda gets one pass and one
// look ahead, and the run ends: a task due in an hour keeps no one awake.
func TestStopWhenIdle(t *testing.T) {
	e := newRealEnv(t, "a", "b")
	e.schedule(t, "a", task.Spec{ID: "later", Delay: ptr(time.Hour)})
	rs := e.runIdle(t)
	if rs.Passes != 2 || rs.Looks != 2 || rs.Stopped != 2 || rs.Failed != 0 {
		t.Errorf("idle run: %+v; want a pass, a look and a stop per lambda", rs)
	}
	// a: its pass's lanes, and its look's (running, flows, enqueued, each priority); b: none.
	if g, d, want := e.count.gates.Load(), e.count.due.Load(), idleReads(3)+3+3; g != 1 || d != want {
		t.Errorf("idle run of 2 lambdas, one with a task due in an hour: %d gate reads, %d due reads; want 1 and %d", g, d, want)
	}
}

// TestStopWhenIdleWaitsForDue: a task that comes due before the minute is up keeps its lambda
// sweeping until it is enqueued, and then while it is in flight (its end may set off what only a
// pass handles); the run ends once it has run, and the other lambda stopped at once.
func TestStopWhenIdleWaitsForDue(t *testing.T) {
	e := newRealEnv(t, "a", "b")
	e.schedule(t, "a", task.Spec{ID: "soon", Delay: ptr(300 * time.Millisecond)})
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go e.work(ctx, "a")
	rs := e.runIdle(t)
	if rs.Enqueued != 1 || rs.Stopped != 2 || rs.Failed != 0 {
		t.Fatalf("run: %+v; want the task enqueued, then both lambdas stopped", rs)
	}
	if tk, err := e.store.Get(t.Context(), "a", "soon"); err != nil || tk.Status != task.StatusSuccess {
		t.Errorf("task: %s, %v; want it run before the stop", tk.Status, err)
	}
}

// TestStopWhenIdleInFlight: a task in flight keeps its lambda sweeping whatever its trigger, as
// one sent ahead to run in ten minutes: a run that would stop is cut by its deadline instead.
func TestStopWhenIdleInFlight(t *testing.T) {
	e := newRealEnv(t, "a")
	tk, _ := task.New(task.Spec{ID: "ahead", Delay: ptr(10 * time.Minute)}, e.ls["a"], time.Now(), task.Config{}.WithDefaults())
	enq, _, err := task.EnqueueAhead(tk, time.Now(), task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Create(t.Context(), enq); err != nil {
		t.Fatal(err)
	}
	rs := e.cons.Run(t.Context(), consumer.RunParams{Interval: 20 * time.Millisecond, Until: time.Now().Add(300 * time.Millisecond), StopWhenIdle: true})
	if rs.Stopped != 0 || rs.Passes < 2 {
		t.Errorf("run: %+v; want passes until the deadline and no stop", rs)
	}
}

// TestStopWhenIdlePaused: the waiting tasks of a paused lambda keep no one awake: they wait for
// the gate, which an idle consumer sees open at its next start.
func TestStopWhenIdlePaused(t *testing.T) {
	e := newRealEnv(t, "a")
	e.schedule(t, "a", task.Spec{ID: "now"})
	if err := e.store.SetGate(t.Context(), task.Gate{Lambda: "a", Mode: task.GatePause, UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if rs := e.runIdle(t); rs.Enqueued != 0 || rs.Stopped != 1 || rs.Passes != 1 {
		t.Errorf("paused: %+v; want one pass and a stop", rs)
	}
	if err := e.store.SetGate(t.Context(), task.Gate{Lambda: "a", Mode: task.GateOpen, UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go e.work(ctx, "a")
	if rs := e.runIdle(t); rs.Enqueued != 1 || rs.Stopped != 1 {
		t.Errorf("open: %+v; want the task enqueued, then a stop", rs)
	}
}

// passCounter cancels a run once it has seen n passes end.
type passCounter struct {
	n      atomic.Int64
	after  int64
	cancel context.CancelFunc
}

func (p *passCounter) Pass(string, time.Duration, bool) {
	if p.n.Add(1) == p.after {
		p.cancel()
	}
}

// TestBusyLambdaNotAskedAgain: a pass that follows one that saw tasks reads the lanes without
// asking whether the lambda has a task triggered: a busy lambda pays that question once, not at
// every pass. Three tasks due under a quota of one take three passes (each full, the next at
// once), and a fourth finds none due.
func TestBusyLambdaNotAskedAgain(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	count := &callCounter{Store: store}
	l := task.Lambda{Name: "busy"}.WithDefaults()
	cfg := task.Config{EnqueueQuota: 1}.WithDefaults()
	for i := range 3 {
		tk, err := task.New(task.Spec{ID: fmt.Sprintf("t%d", i)}, l, time.Now(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Create(t.Context(), tk); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	passes := &passCounter{after: 4, cancel: cancel}
	cons := consumer.New(count, memqueue.New(), consumer.Config{Lambdas: task.FixedCatalog{l}, Task: cfg, Metrics: passes})
	rs := cons.Run(ctx, consumer.RunParams{Interval: time.Hour})
	if rs.Enqueued != 3 || rs.Passes != 4 {
		t.Fatalf("run: %+v; want 3 tasks enqueued in 4 passes", rs)
	}
	// The first pass asks; the second, third and fourth follow passes that saw a task.
	if got := count.triggered.Load(); got != 1 {
		t.Errorf("4 passes of a busy lambda asked %d times whether it had a task triggered, want once", got)
	}
}
