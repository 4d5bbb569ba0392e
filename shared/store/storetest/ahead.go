package storetest

import (
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// testNotBefore: a task sent ahead keeps its NotBefore through every read (Get, GetState,
// GetMany, Due) and through a resend, which stays enqueued; its claim clears it.
func testNotBefore(t *testing.T, s task.Store) {
	ctx, l, now := t.Context(), lambdaName(), base()
	cfg := task.Config{}.WithDefaults()
	tk := plain(l, "ahead", now)
	tk.NextTriggerAt = ptr(now.Add(10 * time.Minute))
	ahead, _, err := task.EnqueueAhead(tk, now, cfg)
	if err != nil || ahead.NotBefore == nil {
		t.Fatalf("EnqueueAhead: %+v, %v", ahead.NotBefore, err)
	}
	create(t, s, ahead)
	mustEqual(t, s, ahead)
	if r, ok := s.(task.StateReader); ok {
		if got, err := r.GetState(ctx, l, "ahead"); err != nil || got.NotBefore == nil || !got.NotBefore.Equal(*ahead.NotBefore) {
			t.Errorf("GetState: not before %v, %v; want %v", got.NotBefore, err, ahead.NotBefore)
		}
	}
	if many, err := s.GetMany(ctx, []task.Ref{{Lambda: l, ID: "ahead"}}); err != nil || len(many) != 1 || many[0].NotBefore == nil {
		t.Errorf("GetMany: %+v, %v; want the task with its not-before", many, err)
	}
	unsent, err := task.Unsent(ahead, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, unsent, ahead.Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	due, err := s.Due(ctx, task.DueParams{Lambda: l, Statuses: []task.Status{task.StatusEnqueued}, Before: now.Add(time.Hour)})
	if err != nil || len(due) != 1 || due[0].NotBefore == nil || !due[0].NotBefore.Equal(*ahead.NotBefore) {
		t.Fatalf("Due of the resend lane after a resend: %+v, %v; want the task with its not-before", due, err)
	}
	claimed, err := task.Claim(due[0], "lease", ahead.NotBefore.Add(time.Millisecond), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, claimed, due[0].Version); err != nil {
		t.Fatalf("Update: %v", err)
	}
	mustEqual(t, s, claimed)
	if claimed.NotBefore != nil {
		t.Errorf("claimed task keeps not-before %v", claimed.NotBefore)
	}
}
