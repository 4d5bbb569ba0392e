package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/task"
)

// graph schedules specs as one batch through the frontend, as a client would.
func (e *env) graph(t *testing.T, lambda string, specs ...task.Spec) []task.Task {
	t.Helper()
	var ls []task.Lambda
	for _, l := range e.ls {
		ls = append(ls, l)
	}
	svc := frontend.New(e.store, frontend.Config{Lambdas: task.FixedCatalog(ls), Task: e.cfg, Now: func() time.Time { return e.now }})
	tasks, created, err := svc.ScheduleBatch(context.Background(), lambda, specs)
	if err != nil || !created {
		t.Fatalf("schedule the graph: created %v, %v", created, err)
	}
	return tasks
}

func (e *env) get(t *testing.T, lambda, id string) task.Task {
	t.Helper()
	tk, err := e.store.Get(context.Background(), lambda, id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// finish runs an enqueued task to the given end through the status transitions.
func (e *env) finish(t *testing.T, lambda, id string, ok bool) {
	t.Helper()
	_, err := task.Apply(context.Background(), e.store, lambda, id, func(tk task.Task) (task.Task, error) {
		tk, err := task.Claim(tk, "lease", e.now, e.cfg)
		if err != nil {
			return tk, err
		}
		if ok {
			return task.Succeed(tk, "lease", []byte(`"done"`), e.now, e.cfg)
		}
		return task.Fail(tk, "lease", "broken", false, e.now, e.cfg, 0)
	})
	if err != nil {
		t.Fatalf("finish %s/%s: %v", lambda, id, err)
	}
}

// TestFlowFailureEndsChainInOneSweep: once a task of a chain fails, one sweep ends every task
// after it as upstream_failed, naming its upstream, across lambdas.
func TestFlowFailureEndsChainInOneSweep(t *testing.T) {
	e := newEnv(t, 0, "a", "b")
	const n = 30
	specs := make([]task.Spec, n)
	for i := range specs {
		specs[i] = task.Spec{ID: fmt.Sprintf("t%02d", i), Lambda: []string{"a", "b"}[i%2]}
		if i > 0 {
			specs[i].After = []task.Ref{{Lambda: specs[i-1].Lambda, ID: specs[i-1].ID}}
		}
	}
	e.graph(t, "a", specs...)
	st := e.sweep(t) // checks the pending tasks; t00 goes to its queue
	if st.Enqueued != 1 {
		t.Fatalf("first sweep enqueued %d, want t00 alone", st.Enqueued)
	}
	e.finish(t, "a", "t00", false)
	st = e.sweep(t)
	if st.UpstreamFailed != n-1 {
		t.Errorf("one sweep ended %d tasks as upstream_failed, want %d", st.UpstreamFailed, n-1)
	}
	for i := 1; i < n; i++ {
		got := e.get(t, specs[i].Lambda, specs[i].ID)
		up := specs[i-1].Lambda + "/" + specs[i-1].ID
		if got.Status != task.StatusUpstreamFailed || !strings.Contains(got.Error, up) {
			t.Errorf("%s: %s %q; want upstream_failed naming %s", specs[i].ID, got.Status, got.Error, up)
		}
	}
	if got := e.get(t, "b", specs[n-1].ID); got.NextTriggerAt != nil {
		t.Errorf("the chain's last task keeps a trigger %v with no downstream to tell", got.NextTriggerAt)
	}
}

// TestFlowDiamond: D runs once B and C succeeded, and not before; its upstreams settle from the
// check (those already ended) and from their ends.
func TestFlowDiamond(t *testing.T) {
	e := newEnv(t, 0, "a")
	e.graph(t, "a",
		task.Spec{ID: "A"},
		task.Spec{ID: "B", After: []task.Ref{{ID: "A"}}},
		task.Spec{ID: "C", After: []task.Ref{{ID: "A"}}},
		task.Spec{ID: "D", After: []task.Ref{{ID: "B"}, {ID: "C"}}},
	)
	e.sweep(t)
	e.finish(t, "a", "A", true)
	if st := e.sweep(t); st.Unblocked != 2 || st.Enqueued != 2 {
		t.Errorf("after A: unblocked %d, enqueued %d; want B and C", st.Unblocked, st.Enqueued)
	}
	e.finish(t, "a", "B", true)
	e.sweep(t)
	if got := e.get(t, "a", "D"); got.Status != task.StatusPending {
		t.Errorf("D is %s with C still running; want pending", got.Status)
	}
	e.finish(t, "a", "C", true)
	e.sweep(t)
	if got := e.get(t, "a", "D"); got.Status != task.StatusEnqueued {
		t.Errorf("D is %s after B and C; want enqueued", got.Status)
	}
}

// TestFlowAllDone: under all_done a task runs once its upstreams ended, however they ended.
func TestFlowAllDone(t *testing.T) {
	e := newEnv(t, 0, "a")
	e.graph(t, "a",
		task.Spec{ID: "X"},
		task.Spec{ID: "Y", After: []task.Ref{{ID: "X"}}, Trigger: task.TriggerAllDone},
	)
	e.sweep(t)
	e.finish(t, "a", "X", false)
	e.sweep(t)
	if got := e.get(t, "a", "Y"); got.Status != task.StatusEnqueued {
		t.Errorf("Y (all_done) is %s after X failed; want enqueued", got.Status)
	}
}

// TestFlowUpstreamEndedBefore: a task created after its upstream ended learns it from its check.
func TestFlowUpstreamEndedBefore(t *testing.T) {
	e := newEnv(t, 0, "a")
	e.schedule(t, "a", task.Spec{ID: "U"})
	e.sweep(t)
	e.finish(t, "a", "U", true)
	e.graph(t, "a", task.Spec{ID: "D", After: []task.Ref{{ID: "U"}}})
	if st := e.sweep(t); st.Unblocked != 1 || st.Enqueued != 1 {
		t.Errorf("unblocked %d, enqueued %d; want D unblocked by its check and enqueued", st.Unblocked, st.Enqueued)
	}
	if got := e.get(t, "a", "U"); got.NextTriggerAt != nil {
		t.Errorf("U keeps a trigger %v once D was told", got.NextTriggerAt)
	}
}
