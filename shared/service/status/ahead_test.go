package status_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// sent records the messages sent to it, and fails every Send while fail is set.
type sent struct {
	mu   sync.Mutex
	msgs []task.Message
	fail bool
}

func (q *sent) Send(_ context.Context, msgs ...task.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fail {
		return errors.New("queue down")
	}
	q.msgs = append(q.msgs, msgs...)
	return nil
}
func (q *sent) Receive(context.Context, task.ReceiveParams) ([]task.Delivery, error) {
	return nil, nil
}
func (q *sent) Delete(context.Context, task.Delivery) error                { return nil }
func (q *sent) Extend(context.Context, task.Delivery, time.Duration) error { return nil }

// running stores a task of lambda l in collection c claimed at now, and returns a controller
// that sends ahead to q, and the task's lease.
func running(t *testing.T, q task.Queue, now time.Time) (*sqlitestore.Store, *status.Controller, string) {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := task.Config{}.WithDefaults()
	tk, _ := task.New(task.Spec{ID: "r", Collection: "c"}, task.Lambda{Name: "l"}.WithDefaults(), now, cfg)
	enq, _, _ := task.EnqueueAhead(tk, now, cfg)
	claimed, err := task.Claim(enq, "lease", now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Create(t.Context(), claimed); err != nil {
		t.Fatal(err)
	}
	return store, status.New(store, status.Config{Task: cfg, Queue: q, Now: func() time.Time { return now }, Jitter: func() float64 { return 0 }}), "lease"
}

// TestRetrySentAhead: a run that fails retriably is enqueued again in the write that records it,
// with a message delayed to the end of its backoff; a fatal one sends nothing, nor does a release.
func TestRetrySentAhead(t *testing.T) {
	now := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	q := &sent{}
	store, hsc, lease := running(t, q, now)
	got, err := hsc.SetResult(t.Context(), "l", "r", lease, status.Result{Outcome: status.Retriable, Error: "flaky"})
	if err != nil || got.Status != task.StatusEnqueued || got.Error != "flaky" {
		t.Fatalf("retriable: %s %q, %v; want enqueued, keeping the error", got.Status, got.Error, err)
	}
	backoff := task.Backoff(1, task.DefaultBackoffBase, task.DefaultBackoffMax, 0)
	if len(q.msgs) != 1 || q.msgs[0].RunAt == nil || !q.msgs[0].RunAt.Equal(now.Add(backoff)) || q.msgs[0].Delay != backoff {
		t.Fatalf("sent %+v; want one message delayed by the backoff %s", q.msgs, backoff)
	}
	if c, _ := store.Counts(t.Context(), "l"); c[task.StatusEnqueued] != 1 || c[task.StatusProcessing] != 0 {
		t.Errorf("counts %v; want the task counted enqueued", c)
	}

	// The retry's claim, then a release: back at once.
	if _, err := hsc.Claim(t.Context(), "l", "r", "d2", ""); err != nil {
		t.Fatal(err)
	}
	tk, _ := store.Get(t.Context(), "l", "r")
	if err := hsc.Release(t.Context(), "l", "r", tk.Lease); err != nil {
		t.Fatal(err)
	}
	// A release is left to the consumer (it is rare, and its event is no retry).
	if tk, _ = store.Get(t.Context(), "l", "r"); tk.Status != task.StatusNew || len(q.msgs) != 1 || tk.Attempts != 1 {
		t.Fatalf("release: %s, attempts %d, sent %+v; want new, due for the consumer, the attempt not counted", tk.Status, tk.Attempts, q.msgs)
	}

	_, hsc2, lease2 := running(t, q, now)
	if got, err := hsc2.SetResult(t.Context(), "l", "r", lease2, status.Result{Outcome: status.Fatal, Error: "no"}); err != nil || got.Status != task.StatusFatalFailure || len(q.msgs) != 1 {
		t.Fatalf("fatal: %s, %v, %d sent; want fatal_failure and nothing sent", got.Status, err, len(q.msgs))
	}
}

// TestRetryAheadGatedOrFailed: a retry whose gate is closed is left to the consumer, as before;
// a retry whose send fails is due again after a poll interval, for the consumer to send.
func TestRetryAheadGatedOrFailed(t *testing.T) {
	now := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	q := &sent{}
	store, hsc, lease := running(t, q, now)
	if err := store.SetGate(t.Context(), task.Gate{Lambda: "l", Collection: "c", Mode: task.GatePause}); err != nil {
		t.Fatal(err)
	}
	if got, err := hsc.SetResult(t.Context(), "l", "r", lease, status.Result{Outcome: status.Retriable}); err != nil || got.Status != task.StatusRetriableFailure || len(q.msgs) != 0 {
		t.Fatalf("gated: %s, %v, %d sent; want retriable_failure for the consumer", got.Status, err, len(q.msgs))
	}

	q.fail = true
	store, hsc, lease = running(t, q, now)
	if _, err := hsc.SetResult(t.Context(), "l", "r", lease, status.Result{Outcome: status.Retriable}); err != nil {
		t.Fatal(err)
	}
	tk, _ := store.Get(t.Context(), "l", "r")
	if tk.Status != task.StatusEnqueued || tk.NextTriggerAt == nil || !tk.NextTriggerAt.Equal(now.Add(task.DefaultPollInterval)) {
		t.Fatalf("failed send: %s due %v; want enqueued, due in a poll interval", tk.Status, tk.NextTriggerAt)
	}
}

// TestStaleMessageRefusedBeforeRetry: a message of the attempt before (a duplicate, a resend)
// that comes while a retry sent ahead waits out its backoff is refused as not due, no conflict:
// the worker cannot tell it from a task's only message come early by its clock, so it lets it
// come back; the retry's own message claims it at its time.
func TestStaleMessageRefusedBeforeRetry(t *testing.T) {
	now := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	clock := now
	q := &sent{}
	store, _, lease := running(t, q, now)
	cfg := task.Config{BackoffBase: 10 * time.Second}.WithDefaults()
	hsc := status.New(store, status.Config{Task: cfg, Queue: q, Now: func() time.Time { return clock }, Jitter: func() float64 { return 0 }})
	if _, err := hsc.SetResult(t.Context(), "l", "r", lease, status.Result{Outcome: status.Retriable, Error: "flaky"}); err != nil {
		t.Fatal(err)
	}
	if _, err := hsc.Claim(t.Context(), "l", "r", "stale-duplicate", ""); !errors.Is(err, task.ErrNotDue) || errors.Is(err, task.ErrConflict) {
		t.Fatalf("a stale message during the backoff: %v, want not due", err)
	}
	clock = *q.msgs[0].RunAt
	if got, err := hsc.Claim(t.Context(), "l", "r", "the-retry", ""); err != nil || got.Attempts != 2 {
		t.Fatalf("the retry's claim at its time: attempt %d, %v", got.Attempts, err)
	}
}
