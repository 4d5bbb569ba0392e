package status_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestDeliveryLatency: the claim of a first attempt logs how long after its run time the task
// was claimed, at debug: at info, the level of the functions' logs, a claim writes nothing (the
// metrics carry the latency, and CloudWatch Logs bills each record).
func TestDeliveryLatency(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg := task.Config{}.WithDefaults()
	runAt := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	tk, err := task.New(task.Spec{ID: "d1"}, task.Lambda{Name: "l"}.WithDefaults(), runAt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	enq, _ := task.Enqueue(tk, runAt, cfg)
	if err := store.Create(t.Context(), enq); err != nil {
		t.Fatal(err)
	}
	var info, logs bytes.Buffer
	both := slog.New(slog.NewMultiHandler(slog.NewJSONHandler(&info, nil), slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	hsc := status.New(store, status.Config{Task: cfg, Logger: both,
		Now: func() time.Time { return runAt.Add(1500 * time.Millisecond) }})
	if _, err := hsc.Claim(t.Context(), "l", "d1", "", ""); err != nil {
		t.Fatal(err)
	}
	if info.Len() > 0 {
		t.Errorf("the claim logged at info: %q; want nothing", info.String())
	}
	var rec struct {
		Lambda     string `json:"lambda"`
		DeliveryMS *int64 `json:"delivery_ms"`
	}
	if err := json.Unmarshal(logs.Bytes(), &rec); err != nil || rec.DeliveryMS == nil || *rec.DeliveryMS != 1500 || rec.Lambda != "l" {
		t.Fatalf("log %q: want one record with lambda l and delivery_ms 1500", logs.String())
	}
}

// enqueuedTask stores an enqueued task d1 of lambda l and returns a controller over the store.
func enqueuedTask(t *testing.T) (*sqlitestore.Store, *status.Controller) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	tk, err := task.New(task.Spec{ID: "d1"}, task.Lambda{Name: "l"}.WithDefaults(), now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	enq, _ := task.Enqueue(tk, now, cfg)
	if err := store.Create(t.Context(), enq); err != nil {
		t.Fatal(err)
	}
	return store, status.New(store, status.Config{Task: cfg, Logger: slog.New(slog.DiscardHandler)})
}

// TestClaimConflictHidesLease: a claim that loses answers a conflict and an empty task, never the
// task with its holder's lease.
func TestClaimConflictHidesLease(t *testing.T) {
	_, hsc := enqueuedTask(t)
	won, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", "")
	if err != nil || won.Lease == "" {
		t.Fatalf("first claim: %+v, %v", won, err)
	}
	for _, delivery := range []string{"receipt-2", ""} {
		lost, err := hsc.Claim(t.Context(), "l", "d1", delivery, "")
		if !errors.Is(err, task.ErrConflict) {
			t.Fatalf("second claim (delivery %q): %v, want a conflict", delivery, err)
		}
		if lost.Lease != "" || lost.ID != "" {
			t.Fatalf("a losing claim received %+v: the holder's lease leaked", lost)
		}
	}
}

// TestClaimRepeatedForDelivery: a claim sent again for the same delivery (its first answer was
// lost) gets the same claim back and counts one attempt, while the task runs under that lease,
// heartbeats or not; its lease is renewed from the repeat, since its caller measures the lease
// from when it sent the repeat. Once the lease is gone, the delivery's claim is spent.
func TestClaimRepeatedForDelivery(t *testing.T) {
	store, _ := enqueuedTask(t)
	clock := time.Now().UTC()
	cfg := task.Config{}.WithDefaults()
	hsc := status.New(store, status.Config{Task: cfg, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }})
	first, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", "")
	if err != nil || first.Status != task.StatusProcessing || !first.NextTriggerAt.Equal(clock.Add(cfg.HeartbeatTimeout)) {
		t.Fatalf("claim: %+v, %v; want processing until a heartbeat timeout from now", first, err)
	}
	for _, step := range []string{"repeated at once", "repeated after a heartbeat"} {
		if step == "repeated after a heartbeat" {
			if err := hsc.Heartbeat(t.Context(), "l", "d1", first.Lease); err != nil {
				t.Fatal(err)
			}
		}
		clock = clock.Add(time.Second)
		again, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", "")
		if err != nil || again.Lease != first.Lease || again.Attempts != 1 || again.Status != task.StatusProcessing {
			t.Fatalf("%s: %+v, %v; want the first claim again (lease %s, attempt 1)", step, again, err, first.Lease)
		}
		if !again.NextTriggerAt.Equal(clock.Add(cfg.HeartbeatTimeout)) {
			t.Fatalf("%s: lease runs to %s, want a heartbeat timeout after the repeat (%s)", step, again.NextTriggerAt, clock.Add(cfg.HeartbeatTimeout))
		}
	}
	if _, err := hsc.Claim(t.Context(), "l", "d1", "receipt-2", ""); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("claim of a running task for another delivery: %v, want a conflict", err)
	}
	if _, err := hsc.SetResult(t.Context(), "l", "d1", first.Lease, status.Result{Outcome: status.Retriable, Error: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", ""); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("claim for a delivery whose run ended: %v, want a conflict", err)
	}
	got, _ := store.Get(t.Context(), "l", "d1")
	if got.Status != task.StatusRetriableFailure || got.Attempts != 1 {
		t.Fatalf("task %s after %d attempts, want retriable_failure after 1", got.Status, got.Attempts)
	}
}

// TestClaimRepeatedStartsOldClaim: a task an older version claimed for a delivery (claimed, not
// yet started) is answered to a repeat of that claim, and started by it: the executor of this
// version sends no start of its own.
func TestClaimRepeatedStartsOldClaim(t *testing.T) {
	store, hsc := enqueuedTask(t)
	tk, err := store.Get(t.Context(), "l", "d1")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	old := tk
	old.Status, old.Lease, old.Attempts, old.Version, old.UpdatedAt = task.StatusClaimed, task.DeliveryLease("l", "d1", "receipt-1", "", 1), 1, tk.Version+1, now
	if err := store.Update(t.Context(), old, tk.Version); err != nil {
		t.Fatal(err)
	}
	again, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", "")
	if err != nil || again.Lease != old.Lease || again.Attempts != 1 || again.Status != task.StatusProcessing {
		t.Fatalf("repeat of an old claim: %+v, %v; want it processing under its lease, attempt 1", again, err)
	}
}

// TestLongErrorEndsTask: a fatal failure whose error is 1 MB long ends the task as fatal_failure,
// keeping the head of the error with a marker, within task.MaxErrorBytes.
// dynamostore.TestLongErrorEndsTask is the same on DynamoDB.
func TestLongErrorEndsTask(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	tk, err := task.New(task.Spec{ID: "e1"}, task.Lambda{Name: "l"}.WithDefaults(), now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	enq, _ := task.Enqueue(tk, now, cfg)
	if err := store.Create(t.Context(), enq); err != nil {
		t.Fatal(err)
	}
	hsc := status.New(store, status.Config{Task: cfg})
	claimed, err := hsc.Claim(t.Context(), "l", "e1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	long := "boom: " + strings.Repeat("x", 1<<20)
	done, err := hsc.SetResult(t.Context(), "l", "e1", claimed.Lease, status.Result{Outcome: status.Fatal, Error: long})
	if err != nil {
		t.Fatalf("SetResult with a 1 MB error: %v", err)
	}
	got, err := store.Get(t.Context(), "l", "e1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range []task.Task{done, got} {
		if tk.Status != task.StatusFatalFailure || len(tk.Error) > task.MaxErrorBytes || !strings.HasPrefix(tk.Error, "boom: xxx") || !strings.Contains(tk.Error, "truncated") {
			t.Errorf("task %s with a %d-byte error; want fatal_failure with the error's head, at most %d bytes, marked truncated", tk.Status, len(tk.Error), task.MaxErrorBytes)
		}
	}
}

// TestClaimHeldByGate: a claim of a task whose gate is closed (a pause of its collection, or a
// drop of its lambda) hands the task back to the store, new and due at once, for the consumer to
// park or drop, and fails with ErrConflict so the worker drops the message. Once the gate opens
// (and the gates read a second ago are stale), the claim goes through.
func TestClaimHeldByGate(t *testing.T) {
	for _, gate := range []task.Gate{
		{Lambda: "l", Mode: task.GateDrop},
		{Lambda: "l", Collection: "c", Mode: task.GatePause},
	} {
		store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		cfg := task.Config{}.WithDefaults()
		now := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
		tk, _ := task.New(task.Spec{ID: "g", Collection: "c"}, task.Lambda{Name: "l"}.WithDefaults(), now, cfg)
		enq, _, _ := task.EnqueueAhead(tk, now, cfg)
		if err := store.Create(t.Context(), enq); err != nil {
			t.Fatal(err)
		}
		if err := store.SetGate(t.Context(), gate); err != nil {
			t.Fatal(err)
		}
		clock := now
		hsc := status.New(store, status.Config{Task: cfg, Now: func() time.Time { return clock }})
		if _, err := hsc.Claim(t.Context(), "l", "g", "r1", ""); !errors.Is(err, task.ErrConflict) {
			t.Fatalf("%+v: claim %v, want ErrConflict", gate, err)
		}
		got, _ := store.Get(t.Context(), "l", "g")
		if got.Status != task.StatusNew || got.NextTriggerAt == nil || !got.NextTriggerAt.Equal(now) || got.Attempts != 0 {
			t.Fatalf("%+v: stored %s due %v attempts %d; want new, due now, no attempt", gate, got.Status, got.NextTriggerAt, got.Attempts)
		}
		// The consumer would now park or drop it; here the gate opens and the task is sent again.
		gate.Mode = task.GateOpen
		if err := store.SetGate(t.Context(), gate); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(status.GateAge)
		enq, _ = task.Enqueue(got, clock, cfg)
		if err := store.Update(t.Context(), enq, got.Version); err != nil {
			t.Fatal(err)
		}
		if c, err := hsc.Claim(t.Context(), "l", "g", "r2", ""); err != nil || c.Attempts != 1 {
			t.Fatalf("%+v opened: claim %v attempts %d, want a claim", gate, err, c.Attempts)
		}
	}
}
