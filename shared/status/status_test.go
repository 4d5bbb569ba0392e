package status_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"path/filepath"
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
