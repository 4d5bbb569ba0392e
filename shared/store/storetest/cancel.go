package storetest

import (
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// testCancelRequested: a running task's cancel mark (task.Cancel) is written by Update and read
// back by every read a transition may start from: Get, GetState, GetMany, and Due's running lane,
// which the consumer's timeouts read. A transition out of running clears it.
func testCancelRequested(t *testing.T, s task.Store) {
	l, now := lambdaName(), base()
	running := plain(l, "running", now)
	running.Status, running.Lease, running.Attempts = task.StatusProcessing, "lease-1", 1
	running.NextTriggerAt = ptr(now.Add(-time.Second))
	create(t, s, running)

	marked, err := task.Cancel(running, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(t.Context(), marked, running.Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	mustEqual(t, s, marked)
	if r, ok := s.(task.StateReader); ok {
		got, err := r.GetState(t.Context(), l, "running")
		if err != nil || !got.CancelRequested {
			t.Errorf("GetState: requested %t, err %v; want the mark", got.CancelRequested, err)
		}
	}
	many, err := s.GetMany(t.Context(), []task.Ref{{Lambda: l, ID: "running"}})
	if err != nil || len(many) != 1 || !many[0].CancelRequested {
		t.Errorf("GetMany: %+v, %v; want the task with its mark", many, err)
	}
	due, err := s.Due(t.Context(), task.DueParams{Lambda: l, Statuses: task.Running, Before: now})
	if err != nil || len(due) != 1 || !due[0].CancelRequested {
		t.Fatalf("Due of the running lane: %+v, %v; want the task with its mark", due, err)
	}

	ended, err := task.Timeout(due[0], now, task.Config{}.WithDefaults(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(t.Context(), ended, due[0].Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	ended.Payload = running.Payload
	mustEqual(t, s, ended)
	if ended.Status != task.StatusCancelled || ended.CancelRequested {
		t.Errorf("timed out after its cancel: %s, requested %t; want cancelled, the mark cleared", ended.Status, ended.CancelRequested)
	}
}
