package frontend_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// kill moves a stored task to status, as its last failed attempt would.
func (f *fixture) kill(lambda, id string, status task.Status) task.Task {
	f.t.Helper()
	tk := f.stored(lambda, id)
	dead := tk
	dead.Status, dead.Attempts, dead.Error, dead.NextTriggerAt = status, dead.MaxAttempts, "boom", nil
	dead.Version, dead.UpdatedAt = tk.Version+1, f.now.UTC()
	if err := f.store.Update(ctx, dead, tk.Version); err != nil {
		f.t.Fatal(err)
	}
	return dead
}

func TestRedriveOne(t *testing.T) {
	f := newFixture(t, task.Config{})
	f.schedule("mail", task.Spec{ID: "m1", Payload: json.RawMessage(`{"to":"a"}`), Priority: "bulk"})
	f.kill("mail", "m1", task.StatusDead)
	f.now = f.now.Add(time.Minute)

	got, err := f.svc.Redrive(ctx, "mail", "m1", task.RedriveOptions{Payload: json.RawMessage(`{"to":"b"}`), Priority: "urgent", MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	stored := f.stored("mail", "m1")
	if stored.Status != task.StatusNew || stored.Attempts != 0 || stored.MaxAttempts != 2 || stored.Priority != "urgent" || string(stored.Payload) != `{"to":"b"}` {
		t.Errorf("redriven: %s attempts %d/%d %s %s", stored.Status, stored.Attempts, stored.MaxAttempts, stored.Priority, stored.Payload)
	}
	if got.Version != stored.Version || stored.NextTriggerAt == nil || !stored.NextTriggerAt.Equal(f.now) {
		t.Errorf("redriven: version %d (answered %d), due %v, want now", stored.Version, got.Version, stored.NextTriggerAt)
	}
	// Once alive it is no longer failed: a second redrive is refused, and changes nothing.
	if _, err := f.svc.Redrive(ctx, "mail", "m1", task.RedriveOptions{}); !errors.Is(err, task.ErrConflict) {
		t.Errorf("redrive of a new task: %v, want a conflict", err)
	}
	for _, c := range []struct {
		lambda, id string
		o          task.RedriveOptions
		want       error
	}{
		{"nope", "m1", task.RedriveOptions{}, task.ErrNotFound},
		{"mail", "missing", task.RedriveOptions{}, task.ErrNotFound},
		{"mail", "bad id!", task.RedriveOptions{}, task.ErrNotFound},
		{"mail", "m1", task.RedriveOptions{Priority: "high"}, task.ErrInvalid},
		{"mail", "m1", task.RedriveOptions{MaxAttempts: 1000}, task.ErrInvalid},
		{"mail", "m1", task.RedriveOptions{Payload: json.RawMessage(`{`)}, task.ErrInvalid},
		{"mail", "m1", task.RedriveOptions{Payload: json.RawMessage(`"` + strings.Repeat("x", task.DefaultPayloadLimit) + `"`)}, task.ErrTooLarge},
	} {
		if _, err := f.svc.Redrive(ctx, c.lambda, c.id, c.o); !errors.Is(err, c.want) {
			t.Errorf("redrive %s/%s: %v, want %v", c.lambda, c.id, err, c.want)
		}
	}
	if after := f.stored("mail", "m1"); after.Version != stored.Version {
		t.Errorf("refused redrives wrote the task: version %d, was %d", after.Version, stored.Version)
	}
}

func TestRedriveMatching(t *testing.T) {
	f := newFixture(t, task.Config{})
	var deadIDs, fatalIDs []string
	for i := range 25 {
		id := fmt.Sprintf("t%02d", i)
		coll := "red"
		if i%2 == 1 {
			coll = "blue"
		}
		f.schedule("echo", task.Spec{ID: id, Collection: coll})
		f.now = f.now.Add(time.Second)
		switch i % 5 {
		case 0, 1, 2:
			f.kill("echo", id, task.StatusDead)
			deadIDs = append(deadIDs, id)
		case 3:
			f.kill("echo", id, task.StatusFatalFailure)
			fatalIDs = append(fatalIDs, id)
		}
	}
	// A dead task with downstreams is skipped, and says why.
	f.schedule("echo", task.Spec{ID: "up"})
	f.schedule("echo", task.Spec{ID: "down", After: []task.Ref{{ID: "up"}}})
	up := f.kill("echo", "up", task.StatusDead)
	if !up.Downstream {
		t.Fatal("the upstream is not marked as having downstreams")
	}

	// Only failed statuses.
	if _, err := f.svc.RedriveMatching(ctx, task.ListParams{Lambda: "echo", Status: task.StatusNew}, task.RedriveOptions{}); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("redrive of new tasks: %v, want invalid", err)
	}

	// The fatal failures of the red collection, a page of 2 at a time.
	var red int
	for _, id := range fatalIDs {
		if f.stored("echo", id).Collection == "red" {
			red++
		}
	}
	total := task.RedriveResult{}
	p := task.ListParams{Lambda: "echo", Status: task.StatusFatalFailure, Collection: "red", Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("the cursor never ends")
		}
		r, err := f.svc.RedriveMatching(ctx, p, task.RedriveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		total.Redriven += r.Redriven
		total.Skipped += r.Skipped
		if r.Next == "" {
			break
		}
		p.Cursor = r.Next
	}
	if total.Redriven != red || total.Skipped != 0 {
		t.Errorf("red fatal failures: %s, want %d redriven", total, red)
	}

	// Then every failed task left, in one page.
	r, err := f.svc.RedriveMatching(ctx, task.ListParams{Lambda: "echo"}, task.RedriveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(deadIDs) + len(fatalIDs) - red; r.Redriven != want || r.Skipped != 1 || r.Next != "" {
		t.Errorf("every failed task: %s next %q, want %d redriven and the upstream skipped", r, r.Next, want)
	}
	if len(r.Skips) != 1 || r.Skips[0].ID != "up" || !strings.Contains(r.Skips[0].Reason, "downstreams") {
		t.Errorf("skips: %+v, want the upstream, for its downstreams", r.Skips)
	}
	for _, id := range append(deadIDs, fatalIDs...) {
		if got := f.stored("echo", id); got.Status != task.StatusNew || got.Attempts != 0 {
			t.Errorf("%s: %s attempts %d after the redrive", id, got.Status, got.Attempts)
		}
	}
	counts, err := f.store.Counts(ctx, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if counts[task.StatusDead] != 1 || counts[task.StatusFatalFailure] != 0 {
		t.Errorf("counts: %v, want the upstream alone failed", counts)
	}
}

// TestListFailedByTime: the dead letters of a time window, both failed statuses at once.
func TestListFailedByTime(t *testing.T) {
	f := newFixture(t, task.Config{})
	start := f.now
	for i := range 6 {
		id := fmt.Sprintf("t%d", i)
		f.schedule("echo", task.Spec{ID: id})
		f.now = f.now.Add(time.Minute)
		if i%3 != 2 {
			f.kill("echo", id, task.Failed[i%2])
		}
	}
	tasks, next, err := f.svc.List(ctx, task.ListParams{Lambda: "echo", Statuses: task.Failed, CreatedFrom: start.Add(time.Minute), CreatedTo: start.Add(5 * time.Minute)})
	if err != nil || next != "" {
		t.Fatalf("list: %v, next %q", err, next)
	}
	if got := fmt.Sprint(ids(tasks)); got != "[t1 t3 t4]" {
		t.Errorf("failed tasks created in minutes 1..4: %s, want [t1 t3 t4]", got)
	}
	if _, _, err := f.svc.List(ctx, task.ListParams{Lambda: "echo", Statuses: []task.Status{"zombie"}}); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("list by an unknown status: %v, want invalid", err)
	}
}

func ids(tasks []task.Task) []string {
	out := make([]string, len(tasks))
	for i, tk := range tasks {
		out[i] = tk.ID
	}
	return out
}
