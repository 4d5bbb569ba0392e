package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// recorder keeps what it is told, as lines.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

func (r *recorder) Transitions(lambda string, from, to task.Status, event lifecycle.Type, n int) {
	r.add("transition %s %q→%s %s %d", lambda, from, to, event, n)
}
func (r *recorder) Delivery(lambda string, latency time.Duration) {
	r.add("delivery %s %s", lambda, latency)
}
func (r *recorder) HandlerRan(lambda, outcome string, took time.Duration) {}
func (r *recorder) Pass(lambda string, took time.Duration, failed bool)   {}
func (r *recorder) StoreError(op string, kind metrics.Kind)               { r.add("error %s %s", op, kind) }
func (r *recorder) Consumed(lambda string, u cost.Units)                  { r.add("consumed %s %+v", lambda, u) }
func (r *recorder) Held(lambda, limit string)                             { r.add("held %s %s", lambda, limit) }

// TestStoreRecordsWrites: a task's life through the wrapper tells its creation, each transition
// with its lifecycle event, and the delivery latency of its first claim, from the write's own
// times; a write that failed tells nothing.
func TestStoreRecordsWrites(t *testing.T) {
	ctx := context.Background()
	base, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	rec := &recorder{}
	s := metrics.Wrap(base, rec)
	cfg := task.Config{}.WithDefaults()
	l := task.Lambda{Name: "echo"}.WithDefaults()
	due := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tk, err := task.New(task.Spec{ID: "one"}, l, due, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, tk); !errors.Is(err, task.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	step := func(fn func(task.Task) (task.Task, error)) {
		t.Helper()
		if _, err := task.Apply(ctx, s, "echo", "one", fn); err != nil {
			t.Fatal(err)
		}
	}
	step(func(t task.Task) (task.Task, error) { return task.Enqueue(t, due, cfg) })
	step(func(t task.Task) (task.Task, error) {
		return task.Claim(t, "lease", due.Add(250*time.Millisecond), cfg)
	})
	step(func(t task.Task) (task.Task, error) {
		return task.Heartbeat(t, "lease", due.Add(time.Second), cfg) // no transition
	})
	step(func(t task.Task) (task.Task, error) {
		return task.Succeed(t, "lease", nil, due.Add(2*time.Second), cfg)
	})

	want := []string{
		`transition echo ""→new scheduled 1`,
		`transition echo "new"→enqueued  1`,
		`transition echo "enqueued"→processing started 1`,
		`delivery echo 250ms`,
		`transition echo "processing"→success succeeded 1`,
	}
	if !slices.Equal(rec.lines, want) {
		t.Errorf("recorded\n%q\nwant\n%q", rec.lines, want)
	}
}

// TestKindOf: answers about tasks are no store errors; throttles, a full store, timeouts and
// anything unknown are.
func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind metrics.Kind
		ok   bool
	}{
		{nil, "", false},
		{task.Errorf(task.ErrNotFound, "x"), "", false},
		{task.Errorf(task.ErrConflict, "x"), "", false},
		{task.Errorf(task.ErrStaleLease, "x"), "", false},
		{&task.Held{Limit: "rate"}, "", false}, // a limit doing its job
		{fmt.Errorf("read: %w", context.Canceled), "", false},
		{&task.Held{Limit: "rate"}, "", false},
		{task.Errorf(task.ErrThrottled, "x"), metrics.KindThrottled, true},
		{task.Errorf(task.ErrStorageFull, "x"), metrics.KindStorageFull, true},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), metrics.KindTimeout, true},
		{errors.New("connection refused"), metrics.KindOther, true},
	} {
		kind, ok := metrics.KindOf(c.err)
		if kind != c.kind || ok != c.ok {
			t.Errorf("KindOf(%v) = %q, %v; want %q, %v", c.err, kind, ok, c.kind, c.ok)
		}
	}
}

// TestTee: each recorder of a Tee is told everything.
func TestTee(t *testing.T) {
	a, b := &recorder{}, &recorder{}
	tee := metrics.Tee{a, b}
	tee.Transitions("echo", task.StatusEnqueued, task.StatusProcessing, lifecycle.Started, 1)
	tee.Delivery("echo", time.Second)
	tee.StoreError("Update", metrics.KindThrottled)
	want := []string{`transition echo "enqueued"→processing started 1`, "delivery echo 1s", "error Update throttled"}
	for _, r := range []*recorder{a, b} {
		if !slices.Equal(r.lines, want) {
			t.Errorf("told %q, want %q", r.lines, want)
		}
	}
}

// lambdaSpy is a store that keeps the lambda each call's context names.
type lambdaSpy struct {
	task.Store
	seen []string
}

func (s *lambdaSpy) Create(ctx context.Context, t task.Task) error {
	s.seen = append(s.seen, "Create "+metrics.LambdaOf(ctx))
	return s.Store.Create(ctx, t)
}

func (s *lambdaSpy) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	s.seen = append(s.seen, "Get "+metrics.LambdaOf(ctx))
	return s.Store.Get(ctx, lambda, id)
}

func (s *lambdaSpy) GetMany(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	s.seen = append(s.seen, "GetMany "+metrics.LambdaOf(ctx))
	return s.Store.GetMany(ctx, refs)
}

func (s *lambdaSpy) Gates(ctx context.Context) ([]task.Gate, error) {
	s.seen = append(s.seen, "Gates "+metrics.LambdaOf(ctx))
	return s.Store.Gates(ctx)
}

// TestStoreNamesTheLambda: each call through the wrapper names its lambda in its context, for a
// store that reports what each call consumed; a call of several lambdas or of none names none.
func TestStoreNamesTheLambda(t *testing.T) {
	ctx := context.Background()
	base, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	spy := &lambdaSpy{Store: base}
	s := metrics.Wrap(spy, &recorder{})
	tk, err := task.New(task.Spec{ID: "one"}, task.Lambda{Name: "echo"}.WithDefaults(), time.Now(), task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "echo", "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMany(ctx, []task.Ref{{Lambda: "echo", ID: "one"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMany(ctx, []task.Ref{{Lambda: "echo", ID: "one"}, {Lambda: "resize", ID: "two"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Gates(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"Create echo", "Get echo", "GetMany echo", "GetMany ", "Gates "}
	if !slices.Equal(spy.seen, want) {
		t.Errorf("the calls' contexts named %q, want %q", spy.seen, want)
	}
}

// heldStore holds back every update, as a store does for a start over a limit.
type heldStore struct{ task.Store }

func (heldStore) Update(context.Context, task.Task, int64) error {
	return &task.Held{Limit: "key_concurrency"}
}

// TestStoreRecordsHeld: an update a limit held back is counted as held, by lambda and limit, and
// as no store error; the caller gets the *task.Held.
func TestStoreRecordsHeld(t *testing.T) {
	rec := &recorder{}
	s := metrics.Wrap(heldStore{}, rec)
	err := s.Update(context.Background(), task.Task{Lambda: "echo", ID: "one"}, 1)
	if _, ok := task.HeldUntil(err); !errors.Is(err, task.ErrHeld) || ok {
		t.Fatalf("Update: %v, want the store's *task.Held", err)
	}
	if want := []string{"held echo key_concurrency"}; !slices.Equal(rec.lines, want) {
		t.Errorf("recorded %q, want %q", rec.lines, want)
	}
}
