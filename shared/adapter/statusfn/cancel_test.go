package statusfn_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// TestCancelOverTheWire: a heartbeat of a task cancelled while it runs is answered with the code
// cancelled, which the Client turns back into task.ErrCancelled; the outcome cancelled then ends
// the task cancelled, and a success reported instead is not kept.
func TestCancelOverTheWire(t *testing.T) {
	e := newEnv(t)
	inv := statusfn.LocalInvoker{Handler: e.h}
	c := statusfn.NewClientLinger(inv, 0)
	for _, outcome := range []status.Outcome{status.Cancelled, status.Success} {
		id := "wire-cancel-" + string(outcome)
		e.fixture(t, id, task.StatusProcessing, eventLease)
		if _, err := task.Apply(t.Context(), e.store, echo.Name, id, func(tk task.Task) (task.Task, error) {
			return task.Cancel(tk, tk.UpdatedAt)
		}); err != nil {
			t.Fatal(err)
		}

		raw, err := inv.Invoke(t.Context(), []byte(`{"v":1,"op":"heartbeat","lambda":"echo","task_id":"`+id+`","lease":"`+eventLease+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		var resp statusfn.Response
		if err := json.Unmarshal(raw, &resp); err != nil || resp.Error == nil || resp.Error.Code != "cancelled" {
			t.Fatalf("heartbeat answered %s, want the code cancelled", raw)
		}
		if err := c.Heartbeat(t.Context(), echo.Name, id, eventLease); !errors.Is(err, task.ErrCancelled) {
			t.Fatalf("Client.Heartbeat: %v, want ErrCancelled", err)
		}

		got, err := c.SetResult(t.Context(), echo.Name, id, eventLease, status.Result{Outcome: outcome, Result: json.RawMessage(`{"hi":"there"}`)})
		if err != nil || got.Status != task.StatusCancelled {
			t.Fatalf("set_result %s after the cancel: %s, %v; want cancelled", outcome, got.Status, err)
		}
		if stored := e.get(t, id); stored.Status != task.StatusCancelled || stored.Result != nil {
			t.Errorf("stored after %s: %s, result %s; want cancelled without a result", outcome, stored.Status, stored.Result)
		}
	}
}
