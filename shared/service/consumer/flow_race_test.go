package consumer_test

// Regression test of task flows found by a hostile review: drop gates and pending tasks.

import (
	"context"
	"testing"

	"github.com/openatf/atf/shared/task"
)

// a drop gate on a lambda drops a pending task as it drops any waiting task: once it is due,
// which for a pending task is once its upstreams allow it to run. Until then it waits, here for an
// upstream in a paused lambda.
func TestFlowDropGateOnPending(t *testing.T) {
	e := newEnv(t, 0, "a", "b")
	e.graph(t, "a",
		task.Spec{ID: "U", Lambda: "b"},
		task.Spec{ID: "D", After: []task.Ref{{Lambda: "b", ID: "U"}}},
		task.Spec{ID: "N"},
	)
	if err := e.store.SetGate(context.Background(), task.Gate{Lambda: "b", Mode: task.GatePause, UpdatedAt: e.now}); err != nil {
		t.Fatal(err)
	}
	e.sweep(t) // D's check
	if err := e.store.SetGate(context.Background(), task.Gate{Lambda: "a", Mode: task.GateDrop, UpdatedAt: e.now}); err != nil {
		t.Fatal(err)
	}
	e.sweep(t)
	if n, d := e.get(t, "a", "N"), e.get(t, "a", "D"); n.Status != task.StatusDropped || d.Status != task.StatusPending {
		t.Fatalf("N is %s, D is %s; want N dropped, D pending while its upstream is held", n.Status, d.Status)
	}
	if err := e.store.SetGate(context.Background(), task.Gate{Lambda: "b", Mode: task.GateOpen, UpdatedAt: e.now}); err != nil {
		t.Fatal(err)
	}
	e.sweep(t)
	e.finish(t, "b", "U", true)
	e.sweep(t)
	e.sweep(t)
	if d := e.get(t, "a", "D"); d.Status != task.StatusDropped {
		t.Errorf("D is %s once its upstream succeeded under a drop gate; want dropped", d.Status)
	}
}
