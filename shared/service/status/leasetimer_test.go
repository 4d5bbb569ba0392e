package status_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// TestMessageTimesLease: a claim that names its message (status.WithMessage) records it on the
// task as its lease's timer, and heartbeats keep it. That message back (another receipt of it:
// its worker stopped hiding it) is refused as not due while the lease lasts, so its caller keeps
// it for later, and times the attempt out once the lease is over. Any other message of the
// running task is a duplicate, dropped (ErrConflict) with the task unchanged; a claim that names
// no message (a worker older than message timers, which would delete it) is refused as not due.
// The message times one claim at most: claimed again with it (a copy delivered twice), the task
// is timed by the store.
func TestMessageTimesLease(t *testing.T) {
	store, _ := enqueuedTask(t)
	clock := time.Now().UTC()
	cfg := task.Config{}.WithDefaults()
	hsc := status.New(store, status.Config{Task: cfg, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }})
	const msg = "5f0c6ab2-9d8e-4a37-b0a1-3c2d1e4f5a6b"
	claimed, err := hsc.Claim(status.WithMessage(t.Context(), msg), "l", "d1", "receipt-1", "")
	if err != nil || claimed.Message != msg {
		t.Fatalf("claim: message %q, %v; want the task timed by %s", claimed.Message, err, msg)
	}
	if !claimed.LeaseOnQueue() {
		t.Fatalf("claimed with its message, the task's lease is not timed by it: %+v", claimed)
	}
	clock = clock.Add(cfg.HeartbeatInterval)
	if err := hsc.Heartbeat(t.Context(), "l", "d1", claimed.Lease); err != nil {
		t.Fatal(err)
	}
	got, _ := store.Get(t.Context(), "l", "d1")
	if got.Message != msg {
		t.Fatalf("after a heartbeat the task is timed by %q, want %s", got.Message, msg)
	}
	running := got

	// Another message of the task (a duplicate): dropped, the task as it was.
	if _, err := hsc.Claim(status.WithMessage(t.Context(), "another"), "l", "d1", "receipt-2", ""); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("claim of another message of the running task: %v, want a conflict", err)
	}
	// A claim that names no message may hold the one that times the lease: not due, kept.
	if _, err := hsc.Claim(t.Context(), "l", "d1", "receipt-old", ""); !errors.Is(err, task.ErrNotDue) {
		t.Fatalf("claim naming no message of a task its message times: %v, want not due", err)
	}
	// Its own message back while the lease lasts: not due, kept.
	clock = clock.Add(cfg.HeartbeatTimeout / 2)
	if _, err := hsc.Claim(status.WithMessage(t.Context(), msg), "l", "d1", "receipt-3", ""); !errors.Is(err, task.ErrNotDue) {
		t.Fatalf("its message back within the lease: %v, want not due", err)
	}
	if got, _ := store.Get(t.Context(), "l", "d1"); got.Version != running.Version {
		t.Fatalf("claims the lease outlived changed the task: version %d, want %d", got.Version, running.Version)
	}
	// Its own message back after the lease: the attempt timed out, the message is dropped.
	clock = running.NextTriggerAt.Add(time.Millisecond)
	if _, err := hsc.Claim(status.WithMessage(t.Context(), msg), "l", "d1", "receipt-4", ""); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("its message back after the lease: %v, want a conflict (timed out)", err)
	}
	got, _ = store.Get(t.Context(), "l", "d1")
	if got.Status != task.StatusRetriableFailure || got.Attempts != 1 || got.LeaseOnQueue() || got.Lease != "" {
		t.Fatalf("after its message came back past the lease: %s, %d attempts, timed by its message %v, lease %q; want retriable_failure, 1, no, none",
			got.Status, got.Attempts, got.LeaseOnQueue(), got.Lease)
	}
	if err := hsc.Heartbeat(t.Context(), "l", "d1", claimed.Lease); !errors.Is(err, task.ErrStaleLease) {
		t.Fatalf("the lost worker's heartbeat: %v, want a stale lease", err)
	}

	// Enqueued again, the task is claimed with the message that timed its first claim (a copy
	// of it its event source mapping delivered twice): that claim is the store's to time, since
	// the message's first holder may delete it.
	clock = *got.NextTriggerAt // its backoff over
	enq, err := task.Enqueue(got, clock, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Update(t.Context(), enq, got.Version); err != nil {
		t.Fatal(err)
	}
	again, err := hsc.Claim(status.WithMessage(t.Context(), msg), "l", "d1", "receipt-5", "")
	if err != nil || again.LeaseOnQueue() {
		t.Fatalf("claim with a message that timed an earlier claim: timed by it %v, %v; want claimed, timed by the store", again.LeaseOnQueue(), err)
	}
	if _, err := hsc.Claim(status.WithMessage(t.Context(), msg), "l", "d1", "receipt-6", ""); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("that message again while the store times the lease: %v, want a conflict (a duplicate)", err)
	}
}
