package storetest

import (
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// testMessageTimesLease: a running task claimed from a message that times its lease
// (task.Task.Message) keeps the message's id through every read a transition starts from (Get,
// GetState, GetMany) and through its heartbeats, so that the message's return is known as its
// own. A store may leave such a task out of its due lane of running tasks (DynamoDB does: that
// entry would cost writes at the claim, each heartbeat and the end); once the lease is given
// back to the store's timer (task.Rearm) every store has it there, due at its lease's end. The
// run's end clears the message.
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
	claimed.Message = msg
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
	if beat.Message != msg {
		t.Fatalf("a heartbeat dropped the message: %q", beat.Message)
	}
	if r, ok := s.(task.StateReader); ok {
		if got, err := r.GetState(t.Context(), l, "t"); err != nil || got.Message != msg {
			t.Errorf("GetState: message %q, %v; want %s", got.Message, err, msg)
		}
	}
	if many, err := s.GetMany(t.Context(), []task.Ref{{Lambda: l, ID: "t"}}); err != nil || len(many) != 1 || many[0].Message != msg {
		t.Errorf("GetMany: %+v, %v; want the task with its message", many, err)
	}

	rearmed, err := task.Rearm(beat, now.Add(2*cfg.HeartbeatInterval))
	if err != nil {
		t.Fatal(err)
	}
	rearmed = step(rearmed, beat.Version)
	if rearmed.Message != "" || !rearmed.NextTriggerAt.Equal(*beat.NextTriggerAt) || rearmed.Lease != "lease" {
		t.Fatalf("rearmed: message %q, due %v, lease %q; want none, the lease's end %v, the lease kept", rearmed.Message, rearmed.NextTriggerAt, rearmed.Lease, beat.NextTriggerAt)
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
	if done = step(done, rearmed.Version); done.Message != "" {
		t.Fatalf("the run's end kept the message %q", done.Message)
	}
}
