package storetest

import (
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// testMessageTimesLease: a running task claimed from a message that times its lease
// (task.Task.Message, MessageFor) keeps the message's id and lease through every read a
// transition starts from (Get, GetState, GetMany) and through its heartbeats, so that the
// message's return is known as its own. A store may leave such a task out of its due lane of
// running tasks (DynamoDB does: that entry would cost writes at the claim, each heartbeat and the
// end); once the lease is given back to the store's timer (task.Rearm) every store has it there,
// due at its lease's end. The id outlives the run (a message times one claim at most).
func testMessageTimesLease(t *testing.T, s task.Store) {
	l, now := lambdaName(), base()
	cfg := task.Config{}.WithDefaults()
	const msg = "5f0c6ab2-9d8e-4a37-b0a1-3c2d1e4f5a6b"
	enq, err := task.Enqueue(plain(l, "t", now), now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, enq)
	claimed, err := task.Claim(enq, "lease", now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	claimed = claimed.TimedBy(msg)
	step := func(next task.Task, prev int64) task.Task {
		t.Helper()
		if err := s.Update(t.Context(), next, prev); err != nil {
			t.Fatalf("Update to %s: %v", next.Status, err)
		}
		mustEqual(t, s, next)
		return next
	}
	claimed = step(claimed, enq.Version)
	beat, err := task.Heartbeat(claimed, "lease", now.Add(cfg.HeartbeatInterval), cfg)
	if err != nil {
		t.Fatal(err)
	}
	beat = step(beat, claimed.Version)
	if !beat.LeaseOnQueue() || beat.Message != msg {
		t.Fatalf("a heartbeat dropped the message: %q for lease %q", beat.Message, beat.MessageFor)
	}
	if r, ok := s.(task.StateReader); ok {
		if got, err := r.GetState(t.Context(), l, "t"); err != nil || !got.LeaseOnQueue() || got.Message != msg {
			t.Errorf("GetState: message %q for lease %q, %v; want %s for the task's", got.Message, got.MessageFor, err, msg)
		}
	}
	if many, err := s.GetMany(t.Context(), []task.Ref{{Lambda: l, ID: "t"}}); err != nil || len(many) != 1 || !many[0].LeaseOnQueue() {
		t.Errorf("GetMany: %+v, %v; want the task with its message", many, err)
	}

	rearmed, err := task.Rearm(beat, now.Add(2*cfg.HeartbeatInterval))
	if err != nil {
		t.Fatal(err)
	}
	rearmed = step(rearmed, beat.Version)
	if rearmed.LeaseOnQueue() || !rearmed.NextTriggerAt.Equal(*beat.NextTriggerAt) || rearmed.Lease != "lease" {
		t.Fatalf("rearmed: timed by its message %v, due %v, lease %q; want no, the lease's end %v, the lease kept", rearmed.LeaseOnQueue(), rearmed.NextTriggerAt, rearmed.Lease, beat.NextTriggerAt)
	}
	running := task.DueParams{Lambda: l, Statuses: task.Running, Before: *rearmed.NextTriggerAt}
	if due, err := s.Due(t.Context(), running); err != nil || len(due) != 1 || due[0].ID != "t" {
		t.Errorf("Due of running tasks at the rearmed lease's end: %v, %v; want the task", ids(due), err)
	}
	running.Before = rearmed.NextTriggerAt.Add(-time.Millisecond)
	if due, err := s.Due(t.Context(), running); err != nil || len(due) != 0 {
		t.Errorf("Due of running tasks before the lease's end: %v, %v; want none", ids(due), err)
	}

	done, err := task.Succeed(rearmed, "lease", nil, now.Add(3*cfg.HeartbeatInterval), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if done = step(done, rearmed.Version); done.LeaseOnQueue() || done.Message != msg {
		t.Fatalf("the run's end: timed by its message %v, message %q; want no, %s kept", done.LeaseOnQueue(), done.Message, msg)
	}
}
