package status_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/sqlitestore"
	"github.com/openatf/atf/shared/status"
	"github.com/openatf/atf/shared/task"
)

// TestDeliveryLatency: the claim of a first attempt logs how long after its run time the task
// was claimed, for the stack's delivery-latency metric.
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
	var logs bytes.Buffer
	hsc := status.New(store, status.Config{Task: cfg, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Now: func() time.Time { return runAt.Add(1500 * time.Millisecond) }})
	if _, err := hsc.Claim(t.Context(), "l", "d1"); err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Lambda     string `json:"lambda"`
		DeliveryMS *int64 `json:"delivery_ms"`
	}
	if err := json.Unmarshal(logs.Bytes(), &rec); err != nil || rec.DeliveryMS == nil || *rec.DeliveryMS != 1500 || rec.Lambda != "l" {
		t.Fatalf("log %q: want one record with lambda l and delivery_ms 1500", logs.String())
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
	claimed, err := hsc.Claim(t.Context(), "l", "e1")
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
