package dynamostore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// TestReportConsumed: through a client with ReportConsumed, the calls of a task's life through
// the metrics wrapper report DynamoDB's units under the lambda it named in their context: the
// writes of its schedule, claim and result, and the reads of the claim and the result, as many as
// cost.TransitionUnits says.
func TestReportConsumed(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	byLambda := map[string]cost.Units{}
	db, table := newTable(t, nil, dynamostore.ReportConsumed(func(ctx context.Context, u cost.Units) {
		mu.Lock()
		defer mu.Unlock()
		byLambda[metrics.LambdaOf(ctx)] = byLambda[metrics.LambdaOf(ctx)].Plus(u)
	}))
	s := metrics.Wrap(newStore(t, db, dynamostore.Config{Table: table}), metrics.Nop{})
	l := task.Lambda{Name: "send-email"}.WithDefaults()
	now := time.Now().UTC()
	tk, err := task.New(task.Spec{ID: task.NewID(now), Payload: []byte(`{"to":"a@example.com"}`)}, l, now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	enq, m, err := task.EnqueueAhead(tk, now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	enq, _ = task.SendFirst(enq, m) // as the API creates it: its message sent first
	if err := s.Create(ctx, enq); err != nil {
		t.Fatal(err)
	}
	hsc := status.New(s, status.Config{})
	// As AWS's workers claim: the message times the lease.
	claimed, err := hsc.Claim(status.WithMessage(ctx, "message-"+tk.ID), l.Name, tk.ID, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hsc.SetResult(ctx, l.Name, tk.ID, claimed.Lease, status.Result{Outcome: status.Success}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	got := byLambda[l.Name]
	t.Logf("reported by lambda: %v", byLambda)
	life := cost.TransitionUnits("", task.StatusEnqueued).Plus(cost.TransitionUnits(task.StatusEnqueued, task.StatusProcessing)).
		Plus(cost.TransitionUnits(task.StatusProcessing, task.StatusSuccess))
	// DynamoDB Local reports a TOTAL with the indexes' units, as DynamoDB does: what the functions
	// write on AWS is then what atf dev's dashboard prices with the model.
	if got != life {
		t.Errorf("the task's life reported %+v for %s, want the model's %+v", got, l.Name, life)
	}
}
