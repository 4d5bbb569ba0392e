package status_test

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// laterStack stores an enqueued task d1 of lambda l and returns a controller over the store, on
// a fixed clock, that knows lambda l as given.
func laterStack(t *testing.T, l task.Lambda) (*sqlitestore.Store, *status.Controller, time.Time) {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := task.Config{}.WithDefaults()
	now := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	tk, err := task.New(task.Spec{ID: "d1"}, l, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	enq, _ := task.Enqueue(tk, now, cfg)
	if err := store.Create(t.Context(), enq); err != nil {
		t.Fatal(err)
	}
	hsc := status.New(store, status.Config{Task: cfg, Logger: slog.New(slog.DiscardHandler), Lambdas: task.FixedCatalog{l},
		Now: func() time.Time { return now }, Jitter: func() float64 { return 0 }})
	return store, hsc, now
}

func delay(d time.Duration) *time.Duration { return &d }

// TestSetResultSnoozed: a run reported snoozed gives its attempt back and is due again after
// its delay; a retriable run with a delay is due after it, its attempt counted.
func TestSetResultSnoozed(t *testing.T) {
	l := task.Lambda{Name: "l"}.WithDefaults()
	store, hsc, now := laterStack(t, l)
	claimed, err := hsc.Claim(t.Context(), "l", "d1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := hsc.SetResult(t.Context(), "l", "d1", claimed.Lease, status.Result{Outcome: status.Snoozed, Delay: delay(time.Hour)})
	if err != nil || got.Status != task.StatusNew || got.Attempts != 0 || !got.NextTriggerAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("snoozed: %s, %d attempts, due %v, %v; want new, 0 attempts, due in 1h", got.Status, got.Attempts, got.NextTriggerAt, err)
	}
	h, err := store.Attempts(t.Context(), "l", "d1")
	if err != nil || len(h.Attempts) != 1 || h.Attempts[0].Outcome != task.OutcomeSnoozed {
		t.Errorf("history %+v, %v; want the run, snoozed", h, err)
	}

	enq, err := task.Enqueue(got, now.Add(time.Hour), task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Update(t.Context(), enq, got.Version); err != nil {
		t.Fatal(err)
	}
	claimed, err = hsc.Claim(t.Context(), "l", "d1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err = hsc.SetResult(t.Context(), "l", "d1", claimed.Lease, status.Result{Outcome: status.Retriable, Error: "429", Delay: delay(2 * time.Hour)})
	if err != nil || got.Status != task.StatusRetriableFailure || got.Attempts != 1 || !got.NextTriggerAt.Equal(now.Add(2*time.Hour)) {
		t.Fatalf("retry after 2h: %s, %d attempts, due %v, %v; want retriable_failure, 1 attempt, due in 2h", got.Status, got.Attempts, got.NextTriggerAt, err)
	}
}

// TestSetResultLaterRefused: a delay the controller cannot honour is refused before any write:
// out of bounds, on an outcome that takes none, or missing from a snooze.
func TestSetResultLaterRefused(t *testing.T) {
	store, hsc, _ := laterStack(t, task.Lambda{Name: "l"}.WithDefaults())
	claimed, err := hsc.Claim(t.Context(), "l", "d1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []status.Result{
		{Outcome: status.Snoozed},
		{Outcome: status.Snoozed, Delay: delay(-time.Second)},
		{Outcome: status.Retriable, Delay: delay(task.MaxDelay + time.Second)},
		{Outcome: status.Success, Delay: delay(time.Second)},
		{Outcome: status.Fatal, Delay: delay(time.Second)},
	} {
		if _, err := hsc.SetResult(t.Context(), "l", "d1", claimed.Lease, r); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("%s after %v: %v, want ErrInvalid", r.Outcome, r.Delay, err)
		}
	}
	if got, err := store.Get(t.Context(), "l", "d1"); err != nil || got.Version != claimed.Version {
		t.Errorf("after refusals: version %d, %v; want %d, unwritten", got.Version, err, claimed.Version)
	}
}

// TestSetResultLambdaBackoff: a retriable failure waits its lambda's backoff, when the lambda
// sets one.
func TestSetResultLambdaBackoff(t *testing.T) {
	l := task.Lambda{Name: "l", Backoff: &task.BackoffPolicy{Base: 7 * time.Minute, Factor: 2, Max: time.Hour}}.WithDefaults()
	_, hsc, now := laterStack(t, l)
	claimed, err := hsc.Claim(t.Context(), "l", "d1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := hsc.SetResult(t.Context(), "l", "d1", claimed.Lease, status.Result{Outcome: status.Retriable, Error: "x"})
	if err != nil || !got.NextTriggerAt.Equal(now.Add(7*time.Minute)) {
		t.Fatalf("retry: due %v, %v; want after the lambda's base, 7m", got.NextTriggerAt, err)
	}
}
