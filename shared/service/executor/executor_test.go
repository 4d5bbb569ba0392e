package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// failingHeartbeats injects the fault: every heartbeat fails (the claim started the task).
type failingHeartbeats struct{ executor.Status }

func (f *failingHeartbeats) Heartbeat(context.Context, string, string, string) error {
	return errors.New("injected: status controller unreachable")
}

type setup struct {
	store *sqlitestore.Store
	hsc   *status.Controller
	cons  *consumer.Consumer
	queue *memqueue.Queue
	cfg   task.Config
	l     task.Lambda
}

func newSetup(t *testing.T) setup {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := task.Config{
		HeartbeatInterval: 20 * time.Millisecond, HeartbeatTimeout: 150 * time.Millisecond,
		LeaseMargin: 60 * time.Millisecond, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
	}.WithDefaults()
	l := task.Lambda{Name: "fenced", Timeout: time.Minute}.WithDefaults()
	q := memqueue.New()
	return setup{
		store: store, hsc: status.New(store, status.Config{Task: cfg}), queue: q, cfg: cfg, l: l,
		cons: consumer.New(store, q, consumer.Config{Lambdas: task.FixedCatalog{l}, Task: cfg}),
	}
}

// executor returns an executor over st with the setup's timings; abandoning a handler fails the
// test instead of ending the test binary.
func (s setup) executor(t *testing.T, st executor.Status) *executor.Executor {
	return executor.New(st, executor.Config{Task: s.cfg, Abandon: func(tk task.Task) {
		t.Errorf("abandoned the handler of %s: it did not return within half the lease margin", tk.ID)
	}})
}

// claimNext sweeps until the task is enqueued again and claims it through an executor, as a
// worker does.
func (s setup) claimNext(t *testing.T, id string) executor.Claimed {
	t.Helper()
	e := s.executor(t, s.hsc)
	for range 500 {
		if _, err := s.cons.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if c, err := e.Claim(context.Background(), s.l.Name, id, ""); err == nil {
			return c
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("task never became claimable")
	return executor.Claimed{}
}

// TestFencing: an executor that cannot heartbeat stops its handler before the task can be
// claimed again, and its late result is rejected; the task runs twice, never at the same time.
func TestFencing(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	tk, err := task.New(task.Spec{ID: "t1"}, s.l, time.Now().UTC(), s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.store.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var running, maxRunning int
	var firstStopped time.Time
	var firstCause error
	handler := worker.HandlerFunc(func(ctx context.Context, wt worker.Task) (json.RawMessage, error) {
		mu.Lock()
		running++
		maxRunning = max(maxRunning, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		if wt.Attempt == 1 {
			<-ctx.Done() // runs until the executor stops it
			mu.Lock()
			firstStopped, firstCause = time.Now(), context.Cause(ctx)
			mu.Unlock()
			return json.RawMessage(`"late"`), nil // a result it must not be able to record
		}
		return json.RawMessage(`"second"`), nil
	})

	faulty := s.executor(t, &failingHeartbeats{Status: s.hsc})
	first := s.claimNext(t, "t1")
	firstDone := make(chan struct{})
	go func() { faulty.Run(ctx, s.l, handler, first); close(firstDone) }()

	second := s.claimNext(t, "t1") // only possible once the heartbeat timeout has passed
	claimedAgain := time.Now()
	s.executor(t, s.hsc).Run(ctx, s.l, handler, second)
	<-firstDone

	mu.Lock()
	defer mu.Unlock()
	if maxRunning != 1 {
		t.Fatalf("handler ran %d at once", maxRunning)
	}
	if firstStopped.IsZero() || firstStopped.After(claimedAgain) {
		t.Fatalf("first run stopped at %v, after the task was claimed again at %v", firstStopped, claimedAgain)
	}
	if firstCause == nil || firstCause.Error() == context.Canceled.Error() {
		t.Fatalf("first run's context cause = %v, want the lease-lost reason", firstCause)
	}
	got, err := s.store.Get(ctx, s.l.Name, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != task.StatusSuccess || string(got.Result) != `"second"` || got.Attempts != 2 {
		t.Fatalf("task ended %s with %s after %d attempts", got.Status, got.Result, got.Attempts)
	}
	// The first lease is dead: its result is refused.
	if _, err := s.hsc.SetResult(ctx, s.l.Name, "t1", first.Lease, status.Result{Outcome: status.Success}); !errors.Is(err, task.ErrStaleLease) {
		t.Fatalf("stale lease result: %v, want ErrStaleLease", err)
	}
}

// TestOutcomes: what a handler returns decides the task's next status, and what it wrote to its
// log (worker.LogOf) is its attempt's log, whatever the outcome.
func TestOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want task.Status
	}{
		{"success", nil, task.StatusSuccess},
		{"retriable", errors.New("try again"), task.StatusRetriableFailure},
		{"fatal", worker.Fatal(errors.New("never")), task.StatusFatalFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			ctx := context.Background()
			tk, _ := task.New(task.Spec{ID: "t"}, s.l, time.Now().UTC(), s.cfg)
			if err := s.store.Create(ctx, tk); err != nil {
				t.Fatal(err)
			}
			claimed := s.claimNext(t, "t")
			s.executor(t, s.hsc).Run(ctx, s.l, worker.HandlerFunc(
				func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
					fmt.Fprintln(worker.LogOf(ctx), "running towards", tc.name)
					return json.RawMessage(`1`), tc.err
				}), claimed)
			got, _ := s.store.Get(ctx, s.l.Name, "t")
			if got.Status != tc.want {
				t.Fatalf("status %s, want %s (error %q)", got.Status, tc.want, got.Error)
			}
			h, err := s.store.Attempts(ctx, s.l.Name, "t")
			if err != nil || len(h.Attempts) != 1 || h.Attempts[0].Log != "running towards "+tc.name+"\n" {
				t.Fatalf("history %+v, %v; want one attempt whose log is what the handler wrote", h.Attempts, err)
			}
		})
	}
}

// TestShutdownReleases: cancelling the executor's context stops the handler and hands the task
// back untried.
func TestShutdownReleases(t *testing.T) {
	s := newSetup(t)
	tk, _ := task.New(task.Spec{ID: "t"}, s.l, time.Now().UTC(), s.cfg)
	if err := s.store.Create(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	claimed := s.claimNext(t, "t")
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() { <-started; cancel() }()
	s.executor(t, s.hsc).Run(ctx, s.l, worker.HandlerFunc(
		func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}), claimed)
	got, _ := s.store.Get(context.Background(), s.l.Name, "t")
	if got.Status != task.StatusNew || got.Attempts != 0 {
		t.Fatalf("after shutdown: %s with %d attempts, want new with 0", got.Status, got.Attempts)
	}
}

// slowHeartbeats injects a slow fault: every heartbeat hangs for hang, whatever its context says,
// and then fails, as a status function that times out does.
type slowHeartbeats struct {
	executor.Status
	hang time.Duration
}

func (f *slowHeartbeats) Heartbeat(context.Context, string, string, string) error {
	time.Sleep(f.hang)
	return errors.New("injected: status function timed out")
}

// TestSlowHeartbeatsStopInTime: heartbeats that each hang longer than the heartbeat timeout and
// then fail never reach three failures in time; the handler must still be stopped before the
// task can be claimed again, by the clock, not by counting failures.
func TestSlowHeartbeatsStopInTime(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	tk, err := task.New(task.Spec{ID: "t1"}, s.l, time.Now().UTC(), s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.store.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan time.Time, 1)
	handler := worker.HandlerFunc(func(ctx context.Context, wt worker.Task) (json.RawMessage, error) {
		if wt.Attempt == 1 {
			<-ctx.Done()
			stopped <- time.Now()
		}
		return nil, nil
	})
	slow := executor.New(&slowHeartbeats{Status: s.hsc, hang: 2 * s.cfg.HeartbeatTimeout}, executor.Config{Task: s.cfg})
	first := s.claimNext(t, "t1")
	firstDone := make(chan struct{})
	go func() { slow.Run(ctx, s.l, handler, first); close(firstDone) }()

	s.claimNext(t, "t1") // only possible once the heartbeat timeout has passed
	claimedAgain := time.Now()
	select {
	case at := <-stopped:
		if at.After(claimedAgain) {
			t.Fatalf("the first run stopped %s after the task was claimed again", at.Sub(claimedAgain))
		}
	default:
		t.Fatal("the first run was still running when the task was claimed again")
	}
	<-firstDone
}

// staleHeartbeats: every heartbeat is refused for a stale lease.
type staleHeartbeats struct{ executor.Status }

func (f *staleHeartbeats) Heartbeat(context.Context, string, string, string) error {
	return task.Errorf(task.ErrStaleLease, "injected: the lease is gone")
}

// TestAbandonStuckHandler: a Go handler that ignores its context cannot be stopped in-process;
// once its lease is lost, the executor gives it half the lease margin and then abandons it
// (by default the process ends), instead of waiting while the task runs again elsewhere.
func TestAbandonStuckHandler(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	tk, _ := task.New(task.Spec{ID: "stuck"}, s.l, time.Now().UTC(), s.cfg)
	if err := s.store.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	abandoned := make(chan task.Task, 1)
	e := executor.New(&staleHeartbeats{Status: s.hsc}, executor.Config{Task: s.cfg, Abandon: func(t task.Task) { abandoned <- t }})
	claimed := s.claimNext(t, "stuck")
	ran := make(chan struct{})
	go func() {
		e.Run(ctx, s.l, worker.HandlerFunc(func(context.Context, worker.Task) (json.RawMessage, error) {
			<-release // ignores its context
			return nil, nil
		}), claimed)
		close(ran)
	}()
	select {
	case got := <-abandoned:
		if got.ID != "stuck" || got.Lease != claimed.Lease {
			t.Fatalf("abandoned %s (lease %s), want the stuck run", got.ID, got.Lease)
		}
	case <-time.After(30 * time.Second): // a hang guard: the grace is half of 25 ms
		t.Fatal("the executor never abandoned a handler that ignores its context after its lease was lost")
	}
	<-ran
}

// TestLateClaimDoesNotRun: a claim answered so late that its lease, measured from when the claim
// was sent, leaves no time to run (as when a worker took long to delete its message) must not
// start the handler: the task is handed back untried instead.
func TestLateClaimDoesNotRun(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	tk, _ := task.New(task.Spec{ID: "t1"}, s.l, time.Now().UTC(), s.cfg)
	if err := s.store.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	late := s.claimNext(t, "t1")
	late.Sent = late.Sent.Add(-(s.cfg.HeartbeatTimeout - s.cfg.LeaseMargin)) // its lease is over by the executor's clock
	var ran atomic.Bool
	s.executor(t, s.hsc).Run(ctx, s.l, worker.HandlerFunc(func(context.Context, worker.Task) (json.RawMessage, error) {
		ran.Store(true)
		return nil, nil
	}), late)
	if ran.Load() {
		t.Fatal("the handler started on a claim answered after its lease had run out")
	}
	if got, _ := s.store.Get(ctx, s.l.Name, "t1"); got.Status != task.StatusNew || got.Attempts != 0 {
		t.Fatalf("task %s after %d attempts, want released: new, untried", got.Status, got.Attempts)
	}
}

// TestStopBeforeStartReleases: a task claimed by an executor that is shut down before it runs it
// is released, not left processing until its heartbeat timeout.
func TestStopBeforeStartReleases(t *testing.T) {
	s := newSetup(t)
	tk, _ := task.New(task.Spec{ID: "t1"}, s.l, time.Now().UTC(), s.cfg)
	if err := s.store.Create(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	claimed := s.claimNext(t, "t1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var ran atomic.Bool
	s.executor(t, s.hsc).Run(ctx, s.l, worker.HandlerFunc(func(context.Context, worker.Task) (json.RawMessage, error) {
		ran.Store(true)
		return nil, nil
	}), claimed)
	if got, _ := s.store.Get(context.Background(), s.l.Name, "t1"); ran.Load() || got.Status != task.StatusNew || got.Attempts != 0 {
		t.Fatalf("ran %v; task %s after %d attempts, want not run and released: new, untried", ran.Load(), got.Status, got.Attempts)
	}
}

// hangingClaim: the claim is written, and its answer never comes before the caller gives up.
type hangingClaim struct {
	executor.Status
	deadline chan time.Time
}

func (f *hangingClaim) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	if _, err := f.Status.Claim(ctx, lambda, id, delivery, token); err != nil {
		return task.Task{}, err
	}
	d, _ := ctx.Deadline()
	f.deadline <- d
	<-ctx.Done()
	return task.Task{}, ctx.Err()
}

// TestClaimGivesUpWithItsLease: a claim call waits no longer than the lease it takes would leave
// a handler (sent + HeartbeatTimeout − LeaseMargin): an answer after that could not be run.
func TestClaimGivesUpWithItsLease(t *testing.T) {
	s := newSetup(t)
	tk, _ := task.New(task.Spec{ID: "t1"}, s.l, time.Now().UTC(), s.cfg)
	enq, _ := task.Enqueue(tk, tk.RunAt, s.cfg)
	if err := s.store.Create(context.Background(), enq); err != nil {
		t.Fatal(err)
	}
	hc := &hangingClaim{Status: s.hsc, deadline: make(chan time.Time, 1)}
	c, err := s.executor(t, hc).Claim(context.Background(), s.l.Name, "t1", "")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a claim whose answer never came: %v, want its deadline", err)
	}
	if d := <-hc.deadline; !d.Equal(c.Sent.Add(s.cfg.HeartbeatTimeout - s.cfg.LeaseMargin)) {
		t.Fatalf("claim deadline %s after its send, want HeartbeatTimeout − LeaseMargin (%s)", d.Sub(c.Sent), s.cfg.HeartbeatTimeout-s.cfg.LeaseMargin)
	}
}

// recordedHeartbeats records when each heartbeat was sent.
type recordedHeartbeats struct {
	executor.Status
	sent chan time.Time
}

func (r *recordedHeartbeats) Heartbeat(ctx context.Context, lambda, id, lease string) error {
	select {
	case r.sent <- time.Now():
	default:
	}
	return r.Status.Heartbeat(ctx, lambda, id, lease)
}

// TestClaimStarts: the claim is the task's start. A handler that returns before the first
// heartbeat interval costs the task two writes, the claim and the result, and the first
// heartbeat of a longer one is sent no sooner than an interval after the claim was sent.
func TestClaimStarts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		interval  time.Duration
		heartbeat bool // the handler waits for the first heartbeat
	}{
		{"returns at once", time.Hour, false},
		{"runs past a heartbeat", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			if tc.interval > 0 {
				s.cfg.HeartbeatInterval, s.cfg.HeartbeatTimeout, s.cfg.LeaseMargin = tc.interval, 6*tc.interval, tc.interval
			}
			ctx := context.Background()
			tk, _ := task.New(task.Spec{ID: "t1"}, s.l, time.Now().UTC(), s.cfg)
			enq, _ := task.Enqueue(tk, tk.RunAt, s.cfg)
			if err := s.store.Create(ctx, enq); err != nil {
				t.Fatal(err)
			}
			rec := &recordedHeartbeats{Status: s.hsc, sent: make(chan time.Time, 1)}
			e := s.executor(t, rec)
			claimed, err := e.Claim(ctx, s.l.Name, "t1", "")
			if err != nil || claimed.Status != task.StatusProcessing {
				t.Fatalf("claim: %s, %v; want processing", claimed.Status, err)
			}
			var first time.Time
			e.Run(ctx, s.l, worker.HandlerFunc(func(context.Context, worker.Task) (json.RawMessage, error) {
				if tc.heartbeat {
					first = <-rec.sent
				}
				return json.RawMessage(`1`), nil
			}), claimed)
			got, _ := s.store.Get(ctx, s.l.Name, "t1")
			if got.Status != task.StatusSuccess || got.Attempts != 1 {
				t.Fatalf("task %s after %d attempts, want success after 1", got.Status, got.Attempts)
			}
			if tc.heartbeat {
				if first.Before(claimed.Sent.Add(s.cfg.HeartbeatInterval)) {
					t.Fatalf("the first heartbeat was sent %s after the claim, before the interval (%s)", first.Sub(claimed.Sent), s.cfg.HeartbeatInterval)
				}
				return
			}
			select {
			case at := <-rec.sent:
				t.Fatalf("a heartbeat was sent %s after the claim, before the interval (%s)", at.Sub(claimed.Sent), tc.interval)
			default:
			}
			if got.Version != enq.Version+2 {
				t.Fatalf("version %d after the claim and the result, want %d: a write more than those two", got.Version, enq.Version+2)
			}
		})
	}
}

// TestProgramNotAbandoned: a program stopped with its lease is killed with its process group and
// its handler returns at once, even while a process outside the group holds its output open
// (coreutils timeout makes a group of its own): it is never abandoned, which would end the
// process that runs it.
func TestProgramNotAbandoned(t *testing.T) {
	s := newSetup(t)
	// A grace of 300 ms, far below the 2 s a wait for the output would take, and far above what a
	// loaded machine takes to return from a kill.
	s.cfg.HeartbeatTimeout, s.cfg.LeaseMargin = 1200*time.Millisecond, 600*time.Millisecond
	ctx := context.Background()
	tk, _ := task.New(task.Spec{ID: "prog"}, s.l, time.Now().UTC(), s.cfg)
	if err := s.store.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := dir + "/h.sh"
	// A program whose helper runs under coreutils timeout (its own process group) and keeps stdout.
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntimeout 5 sleep 5\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	abandoned := make(chan task.Task, 1)
	e := executor.New(&staleHeartbeats{Status: s.hsc}, executor.Config{Task: s.cfg, Abandon: func(t task.Task) { abandoned <- t }})
	claimed := s.claimNext(t, "prog")
	e.Run(ctx, s.l, worker.Program{Path: script}, claimed)
	select {
	case <-abandoned:
		t.Fatalf("a program handler (SIGKILLed at once) was abandoned: with the default Abandon the whole process (atf dev, the ECS executor) would exit 70; grace M/2=%s < WaitDelay 2s", s.cfg.LeaseMargin/2)
	default:
	}
}

// recordedResults records what the executor reports.
type recordedResults struct {
	executor.Status
	mu      sync.Mutex
	results []status.Result
}

func (r *recordedResults) SetResult(ctx context.Context, lambda, id, lease string, res status.Result) (task.Task, error) {
	r.mu.Lock()
	r.results = append(r.results, res)
	r.mu.Unlock()
	return r.Status.SetResult(ctx, lambda, id, lease, res)
}

// TestReportBounded: what a handler returns is reported within the task's limits: a result over
// the payload limit as a fatal failure that says so, an error cut to MaxErrorBytes. A Go handler
// may return any size, and the status call on AWS fails above Lambda's invoke limit.
func TestReportBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result json.RawMessage
		err    error
		want   status.Outcome
	}{
		{"result", json.RawMessage(`"` + strings.Repeat("r", 7<<20) + `"`), nil, status.Fatal},
		{"retriable error", nil, errors.New(strings.Repeat("e", 7<<20)), status.Retriable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			ctx := context.Background()
			tk, _ := task.New(task.Spec{ID: "t"}, s.l, time.Now().UTC(), s.cfg)
			if err := s.store.Create(ctx, tk); err != nil {
				t.Fatal(err)
			}
			rec := &recordedResults{Status: s.hsc}
			s.executor(t, rec).Run(ctx, s.l, worker.HandlerFunc(
				func(context.Context, worker.Task) (json.RawMessage, error) { return tc.result, tc.err }), s.claimNext(t, "t"))
			if len(rec.results) != 1 {
				t.Fatalf("%d results reported, want 1", len(rec.results))
			}
			r := rec.results[0]
			if r.Outcome != tc.want || len(r.Result) > s.cfg.PayloadLimit || len(r.Error) > task.MaxErrorBytes || r.Error == "" {
				t.Errorf("reported %s with a result of %d bytes and an error of %d bytes (%.60q); want %s within %d and %d bytes",
					r.Outcome, len(r.Result), len(r.Error), r.Error, tc.want, s.cfg.PayloadLimit, task.MaxErrorBytes)
			}
		})
	}
}

// slowMetrics holds every HandlerRan until release is closed, as a starved machine can hold the
// handler's goroutine between its return and its report.
type slowMetrics struct{ release chan struct{} }

func (m slowMetrics) HandlerRan(string, string, time.Duration) { <-m.release }

// TestStoppedHandlerReturnedNotAbandoned: a handler that returns as soon as it is stopped is not
// abandoned, however long what follows its return on its goroutine takes (here the metrics, held
// past the grace): the executor judges the handler by its return, not by its report. It had
// abandoned such handlers, and atf dev ended itself (exit 70) under make chaos for handlers that
// had returned.
func TestStoppedHandlerReturnedNotAbandoned(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	tk, _ := task.New(task.Spec{ID: "returns"}, s.l, time.Now().UTC(), s.cfg)
	if err := s.store.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	metrics := slowMetrics{release: make(chan struct{})}
	defer close(metrics.release)
	abandoned := make(chan task.Task, 1)
	e := executor.New(&staleHeartbeats{Status: s.hsc}, executor.Config{Task: s.cfg, Metrics: metrics, Abandon: func(t task.Task) { abandoned <- t }})
	claimed := s.claimNext(t, "returns")
	e.Run(ctx, s.l, worker.HandlerFunc(func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
		<-ctx.Done() // returns as soon as it is stopped
		return nil, ctx.Err()
	}), claimed)
	select {
	case got := <-abandoned:
		t.Fatalf("abandoned %s, whose handler had returned when it was stopped", got.ID)
	default:
	}
}
