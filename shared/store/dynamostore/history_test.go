package dynamostore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// TestHistoryOfAnIDUsedAgain: a task created again under the id of one that TTL removed has
// only its own attempts in its history. TTL deletes each item on its own, up to days late, so
// the first task's attempt items may outlive its task item: here the task item alone is deleted,
// as TTL may do, once every item of the first task has expired. The first task failed more
// often (task.MaxHistory + 2 times) than the second one runs, and the second one's first attempt
// has no error and no worker, where the first one's had both.
func TestHistoryOfAnIDUsedAgain(t *testing.T) {
	db, table := newTable(t, nil)
	now := time.Now().UTC().Truncate(time.Microsecond)
	s := newStore(t, db, dynamostore.Config{Table: table})
	cfg := task.Config{}.WithDefaults()
	l := task.Lambda{Name: "mail"}.WithDefaults()
	update := func(next, prev task.Task) {
		t.Helper()
		if err := s.Update(t.Context(), next, prev.Version); err != nil {
			t.Fatalf("Update to %s: %v", next.Status, err)
		}
	}
	// run runs one attempt of tk, due at now, claimed by worker and ended by end at now.
	run := func(tk task.Task, worker string, end func(running task.Task) (task.Task, error)) task.Task {
		t.Helper()
		enq, err := task.Enqueue(tk, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		update(enq, tk)
		claimed, err := task.Claim(enq, "lease", now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		claimed.Worker = worker
		update(claimed, enq)
		ended, err := end(claimed)
		if err != nil {
			t.Fatal(err)
		}
		update(ended, claimed)
		return ended
	}
	fail := func(msg string) func(task.Task) (task.Task, error) {
		return func(r task.Task) (task.Task, error) { return task.Fail(r, "lease", msg, true, now, cfg, 0) }
	}

	first, err := task.New(task.Spec{ID: "x", MaxAttempts: task.MaxHistory + 2}, l, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= task.MaxHistory+2; i++ {
		first = run(first, "old-exec", fail(fmt.Sprintf("old %d", i)))
		if first.NextTriggerAt != nil {
			now = *first.NextTriggerAt
		}
	}
	if first.Status != task.StatusDead {
		t.Fatalf("the first task is %s, want dead", first.Status)
	}
	now = now.Add(dynamostore.DefaultRetention + time.Hour)
	if _, err := db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: &table, Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "task#mail#x"}, "sk": &types.AttributeValueMemberS{Value: "task"},
	}}); err != nil {
		t.Fatal(err)
	}

	second, err := task.New(task.Spec{ID: "x"}, l, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(t.Context(), second); err != nil {
		t.Fatal(err)
	}
	start1 := now
	second = run(second, "", fail(""))
	now = *second.NextTriggerAt
	start2 := now
	run(second, "new-exec", func(r task.Task) (task.Task, error) { return task.Succeed(r, "lease", nil, now, cfg) })

	got, err := s.Attempts(t.Context(), "mail", "x")
	if err != nil {
		t.Fatal(err)
	}
	want := []task.Attempt{
		{Number: 1, StartedAt: start1, EndedAt: start1, Outcome: task.OutcomeRetriable},
		{Number: 2, StartedAt: start2, EndedAt: start2, Outcome: task.OutcomeSuccess, Worker: "new-exec"},
	}
	if len(got.Attempts) != len(want) || got.Dropped != 0 {
		t.Fatalf("history of the second task: %d attempts, %d dropped, want %d, 0:\n%+v", len(got.Attempts), got.Dropped, len(want), got.Attempts)
	}
	for i, w := range want {
		g := got.Attempts[i]
		if g.Number != w.Number || !g.StartedAt.Equal(w.StartedAt) || !g.EndedAt.Equal(w.EndedAt) || g.Outcome != w.Outcome || g.Error != w.Error || g.Worker != w.Worker {
			t.Errorf("attempt %d:\n  got  %+v\n  want %+v", i+1, g, w)
		}
	}
}
