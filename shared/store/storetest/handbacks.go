package storetest

import (
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// testHandBacks: the count of a task's claims handed back untried (task.Unclaim) is written by
// Update and read back by every read a transition may start from: Get, GetState, GetMany, and
// Due's lane of new tasks, which the consumer enqueues from. It outlives the enqueue and the next
// claim, so that it bounds the hand-backs of one attempt across them (task.MaxHandBacks), and a
// counted attempt sets it back to zero.
func testHandBacks(t *testing.T, s task.Store) {
	l, now := lambdaName(), base()
	cfg := task.Config{}.WithDefaults()
	running := plain(l, "t", now)
	running.Status, running.Lease, running.Attempts = task.StatusProcessing, "lease-1", 1
	running.NextTriggerAt = ptr(now.Add(time.Minute))
	create(t, s, running)

	back, err := task.Unclaim(running, "lease-1", now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(t.Context(), back, running.Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	mustEqual(t, s, back)
	if r, ok := s.(task.StateReader); ok {
		got, err := r.GetState(t.Context(), l, "t")
		if err != nil || got.HandBacks != 1 {
			t.Errorf("GetState: %d hand-backs, err %v; want 1", got.HandBacks, err)
		}
	}
	many, err := s.GetMany(t.Context(), []task.Ref{{Lambda: l, ID: "t"}})
	if err != nil || len(many) != 1 || many[0].HandBacks != 1 {
		t.Errorf("GetMany: %+v, %v; want the task with 1 hand-back", many, err)
	}
	due, err := s.Due(t.Context(), task.DueParams{Lambda: l, Statuses: []task.Status{task.StatusNew}, Before: now.Add(time.Second)})
	if err != nil || len(due) != 1 || due[0].HandBacks != 1 {
		t.Fatalf("Due of the new lane: %+v, %v; want the task with 1 hand-back", due, err)
	}

	enq, err := task.Enqueue(due[0], now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := task.Claim(enq, "lease-2", now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ next, prev task.Task }{{enq, due[0]}, {claimed, enq}} {
		if err := s.Update(t.Context(), w.next, w.prev.Version); err != nil {
			t.Fatalf("Update to %s: %v", w.next.Status, err)
		}
	}
	claimed.Payload = running.Payload
	mustEqual(t, s, claimed)
	if claimed.HandBacks != 1 {
		t.Fatalf("claimed again: %d hand-backs, want 1 kept", claimed.HandBacks)
	}

	failed, err := task.Fail(claimed, "lease-2", "no", true, now, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(t.Context(), failed, claimed.Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	mustEqual(t, s, failed)
	if failed.HandBacks != 0 {
		t.Errorf("after a counted attempt: %d hand-backs, want 0", failed.HandBacks)
	}
}
