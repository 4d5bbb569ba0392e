package sqsworker_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// TestRatedBatchBooksSlots: a batch of records under a rate faster than SQS's whole seconds (a
// backlog as a worker function receives it) starts one task, and each other claim is held until
// a slot of its own that it booked, an interval after the one before, its record hidden until
// then: the held messages come back spread, each to start on its booking, not all at the one
// next start, where all but one would be held again.
func TestRatedBatchBooksSlots(t *testing.T) {
	t.Parallel()
	const n = 10
	rate := task.StartRate{Count: 20, Per: time.Second}
	e := newEnv(t)
	l := echo
	l.Limits = task.Limits{Rate: rate}
	hsc := status.New(e.store, status.Config{Task: cfg, Logger: slog.New(slog.DiscardHandler), Lambdas: task.FixedCatalog{l}})
	var tasks []string
	for i := range n {
		id := fmt.Sprint("r", i)
		e.put(t, id, `{}`, 0, false)
		tasks = append(tasks, id)
	}
	q := &sending{}
	h := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: hsc, Queue: q})
	before := time.Now()
	resp, err := h.Handle(context.Background(), event(tasks...))
	after := time.Now()
	must(t, err)
	if got := len(failures(resp)); got != n-1 {
		t.Fatalf("%d records failed, want the %d held", got, n-1)
	}
	var slots []time.Time
	for _, id := range tasks {
		tk := e.get(t, id)
		if tk.Status == task.StatusSuccess {
			continue
		}
		if tk.Status != task.StatusEnqueued || tk.Attempts != 0 || tk.RateSlot == nil {
			t.Fatalf("task %s is %s after %d attempts, slot %v; want enqueued, untried, with a slot booked", id, tk.Status, tk.Attempts, tk.RateSlot)
		}
		slot := *tk.RateSlot
		// The worker hid the record from its own clock's now, read during Handle, until the slot.
		if hidden := q.calls["rh-"+id]; hidden < slot.Sub(after) || hidden > slot.Sub(before) {
			t.Errorf("task %s: its record is hidden for %s; want until its slot, %s after the batch began", id, hidden, slot.Sub(before))
		}
		slots = append(slots, slot)
	}
	slices.SortFunc(slots, time.Time.Compare)
	for i := 1; i < len(slots); i++ {
		if gap := slots[i].Sub(slots[i-1]); gap < rate.Interval() {
			t.Errorf("booked slots %v and %v are %s apart; want the rate's interval, %s, at least", slots[i-1], slots[i], gap, rate.Interval())
		}
	}
	if len(slots) == n-1 {
		t.Logf("%d held claims booked slots over %s", len(slots), slots[len(slots)-1].Sub(slots[0]))
	}
}
