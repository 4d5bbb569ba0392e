package status_test

import (
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// claimedTasks stores n enqueued tasks of lambda l, claims each, and returns the claims and the
// controller.
func claimedTasks(t *testing.T, store task.Store, n int) ([]task.Task, *status.Controller) {
	t.Helper()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	hsc := status.New(store, status.Config{Task: cfg, Logger: slog.New(slog.DiscardHandler)})
	claims := make([]task.Task, n)
	for i := range claims {
		tk, err := task.New(task.Spec{ID: "c" + strconv.Itoa(i)}, task.Lambda{Name: "l"}.WithDefaults(), now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		enq, _ := task.Enqueue(tk, now, cfg)
		if err := store.Create(t.Context(), enq); err != nil {
			t.Fatal(err)
		}
		if claims[i], err = hsc.Claim(t.Context(), "l", tk.ID, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	return claims, hsc
}

// TestCompleterRecords: every result handed over is recorded by Close, under its lease, with its
// outcome: successes with their result, a fatal failure with its error and log, also for a task written
// since its claim (a heartbeat). A result under a lease that is not the task's changes nothing.
func TestCompleterRecords(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	claims, hsc := claimedTasks(t, store.Unsynced(), 40)
	k := status.NewCompleter(hsc, nil)
	for i, c := range claims[:38] {
		if i == 5 {
			if err := hsc.Heartbeat(t.Context(), c.Lambda, c.ID, c.Lease); err != nil {
				t.Fatal(err)
			}
		}
		k.Complete(c.Lambda, c.ID, c.Lease, status.Result{Outcome: status.Success, Result: []byte(`{"i":` + strconv.Itoa(i) + `}`)})
	}
	k.Complete("l", claims[38].ID, claims[38].Lease, status.Result{Outcome: status.Fatal, Error: "boom", Log: "checking the address\n"})
	k.Complete("l", claims[39].ID, "not-its-lease", status.Result{Outcome: status.Success})
	k.Close()
	for i, c := range claims {
		got, err := store.Get(t.Context(), "l", c.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i < 38 && (got.Status != task.StatusSuccess || string(got.Result) != `{"i":`+strconv.Itoa(i)+`}`):
			t.Errorf("task %s: status %s, result %s; want success with its result", c.ID, got.Status, got.Result)
		case i == 38 && (got.Status != task.StatusFatalFailure || got.Error != "boom"):
			t.Errorf("task %s: status %s, error %q; want fatal_failure, boom", c.ID, got.Status, got.Error)
		case i == 38:
			if h, err := store.Attempts(t.Context(), "l", c.ID); err != nil || len(h.Attempts) != 1 || h.Attempts[0].Log != "checking the address\n" {
				t.Errorf("task %s: history %+v, %v; want its attempt with the result's log", c.ID, h.Attempts, err)
			}
		case i == 39 && got.Status != task.StatusProcessing:
			t.Errorf("task %s, its result under another lease: status %s, want processing", c.ID, got.Status)
		}
	}
	// After Close, a result is recorded before Complete returns.
	k.Complete("l", claims[39].ID, claims[39].Lease, status.Result{Outcome: status.Success})
	if got, err := store.Get(t.Context(), "l", claims[39].ID); err != nil || got.Status != task.StatusSuccess {
		t.Errorf("a result handed over after Close: status %s, %v; want success", got.Status, err)
	}
}
