package status_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// cancelWhileRunning accepts a cancel of the running task d1, as the frontend does.
func cancelWhileRunning(t *testing.T, store task.Store) {
	t.Helper()
	if _, err := task.Apply(t.Context(), store, "l", "d1", func(tk task.Task) (task.Task, error) {
		return task.Cancel(tk, tk.UpdatedAt)
	}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
}

// TestCancelRunning: once a cancel of a running task is accepted, its heartbeat answers
// task.ErrCancelled without renewing the lease, and the executor's report of the outcome
// cancelled ends it cancelled.
func TestCancelRunning(t *testing.T) {
	store, hsc := enqueuedTask(t)
	c, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hsc.SetResult(t.Context(), "l", "d1", c.Lease, status.Result{Outcome: status.Cancelled}); !errors.Is(err, task.ErrConflict) {
		t.Errorf("outcome cancelled of a task never cancelled: %v, want ErrConflict", err)
	}
	cancelWhileRunning(t, store)
	before, _ := store.Get(t.Context(), "l", "d1")
	if err := hsc.Heartbeat(t.Context(), "l", "d1", c.Lease); !errors.Is(err, task.ErrCancelled) {
		t.Fatalf("heartbeat after the cancel: %v, want ErrCancelled", err)
	}
	if after, _ := store.Get(t.Context(), "l", "d1"); after.Version != before.Version {
		t.Errorf("the refused heartbeat wrote the task: version %d, was %d", after.Version, before.Version)
	}
	if err := hsc.Heartbeat(t.Context(), "l", "d1", "not-the-lease"); !errors.Is(err, task.ErrStaleLease) {
		t.Errorf("heartbeat with another lease: %v, want ErrStaleLease", err)
	}
	got, err := hsc.SetResult(t.Context(), "l", "d1", c.Lease, status.Result{Outcome: status.Cancelled})
	if err != nil || got.Status != task.StatusCancelled {
		t.Fatalf("outcome cancelled: %s, %v; want cancelled", got.Status, err)
	}
}

// TestResultAfterCancel: a result reported after an accepted cancel is not kept, whatever the
// outcome: the task ends cancelled, and the answer says so.
func TestResultAfterCancel(t *testing.T) {
	for _, r := range []status.Result{
		{Outcome: status.Success, Result: json.RawMessage(`{"done":true}`)},
		{Outcome: status.Retriable, Error: "try again"},
		{Outcome: status.Fatal, Error: "broken"},
	} {
		t.Run(string(r.Outcome), func(t *testing.T) {
			store, hsc := enqueuedTask(t)
			c, err := hsc.Claim(t.Context(), "l", "d1", "", "")
			if err != nil {
				t.Fatal(err)
			}
			cancelWhileRunning(t, store)
			got, err := hsc.SetResult(t.Context(), "l", "d1", c.Lease, r)
			if err != nil || got.Status != task.StatusCancelled {
				t.Fatalf("result after the cancel: %s, %v; want cancelled", got.Status, err)
			}
			stored, _ := store.Get(t.Context(), "l", "d1")
			if stored.Status != task.StatusCancelled || stored.Result != nil || stored.CancelRequested {
				t.Errorf("stored: %s, result %s, requested %t; want cancelled, no result, the mark cleared", stored.Status, stored.Result, stored.CancelRequested)
			}
		})
	}
}

// TestClaimAgainAfterCancel: a claim sent again for its delivery (its first answer lost) finds
// the task cancelled meanwhile: its handler never ran, so the task ends cancelled at once and the
// claim is refused.
func TestClaimAgainAfterCancel(t *testing.T) {
	store, hsc := enqueuedTask(t)
	if _, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", ""); err != nil {
		t.Fatal(err)
	}
	cancelWhileRunning(t, store)
	if got, err := hsc.Claim(t.Context(), "l", "d1", "receipt-1", ""); !errors.Is(err, task.ErrConflict) || got.Lease != "" {
		t.Fatalf("claim again: lease %q, %v; want ErrConflict and no task", got.Lease, err)
	}
	if stored, _ := store.Get(t.Context(), "l", "d1"); stored.Status != task.StatusCancelled {
		t.Errorf("stored: %s, want cancelled", stored.Status)
	}
}
