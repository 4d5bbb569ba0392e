package storetest

import (
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// testListFailed: ListFailed pages through the tasks of every lambda that failed for good, latest
// updated first, each once, with their payloads; a status filter keeps one of the two; a task
// redriven leaves the list, and comes back at its new time when it fails again. Other subtests
// share the store, so the test pages through the whole list and looks at its own lambdas' tasks.
func testListFailed(t *testing.T, s task.Store) {
	ctx := t.Context()
	l1, l2 := lambdaName(), lambdaName()
	at := base()
	large := json.RawMessage(`"` + strings.Repeat("p", 2000) + `"`) // an item of its own on DynamoDB
	var failed []task.Task
	end := func(tk task.Task, status task.Status, after time.Duration) task.Task {
		t.Helper()
		ended := tk
		ended.Status, ended.NextTriggerAt, ended.Error = status, nil, "boom "+tk.ID
		ended.Version, ended.UpdatedAt = tk.Version+1, at.Add(after)
		if err := s.Update(ctx, ended, tk.Version); err != nil {
			t.Fatalf("Update %s/%s to %s: %v", tk.Lambda, tk.ID, status, err)
		}
		if slices.Contains(task.Failed, status) {
			failed = append(failed, ended)
		}
		return ended
	}
	for i, c := range []struct {
		lambda, id string
		status     task.Status
		after      time.Duration
	}{
		{l1, "dead-1", task.StatusDead, 1 * time.Second},
		{l1, "fatal-1", task.StatusFatalFailure, 3 * time.Second},
		{l1, "ok-1", task.StatusSuccess, 5 * time.Second},
		{l1, "gone-1", task.StatusCancelled, 6 * time.Second},
		{l2, "dead-2", task.StatusDead, 2 * time.Second},
		{l2, "fatal-2", task.StatusFatalFailure, 4 * time.Second},
		{l2, "dead-3", task.StatusDead, 3 * time.Second}, // as late as fatal-1: l1 and l2 decide
		{l2, "dead-4", task.StatusDead, 3 * time.Second}, // and then the ids
	} {
		tk := plain(c.lambda, c.id, at.Add(time.Duration(i)*time.Millisecond))
		tk.Payload = json.RawMessage(`{"n":1}`)
		if c.id == "fatal-2" {
			tk.Payload = large
		}
		create(t, s, tk)
		end(tk, c.status, c.after)
	}
	waiting := plain(l1, "new-1", at)
	create(t, s, waiting)

	mine := func(tk task.Task) bool { return tk.Lambda == l1 || tk.Lambda == l2 }
	// all pages through the list with p, three at a time, and returns the tasks of l1 and l2.
	all := func(p task.FailedParams) []task.Task {
		t.Helper()
		p.Limit = 3
		var got []task.Task
		for range 1000 {
			page, next, err := s.ListFailed(ctx, p)
			if err != nil {
				t.Fatalf("ListFailed %+v: %v", p, err)
			}
			if len(page) > p.Limit {
				t.Fatalf("ListFailed %+v: %d tasks, over the limit", p, len(page))
			}
			for _, tk := range page {
				if !slices.Contains(p.StatusSet(), tk.Status) {
					t.Errorf("ListFailed %+v: %s/%s is %s", p, tk.Lambda, tk.ID, tk.Status)
				}
			}
			got = append(got, slices.DeleteFunc(page, func(tk task.Task) bool { return !mine(tk) })...)
			if next == "" {
				return got
			}
			p.Cursor = next
		}
		t.Fatalf("ListFailed %+v: still a cursor after 1000 pages", p)
		return nil
	}
	// want is the failed tasks of l1 and l2 in statuses, in the list's order.
	want := func(statuses ...task.Status) []task.Task {
		var w []task.Task
		for _, tk := range failed {
			if slices.Contains(statuses, tk.Status) {
				w = append(w, tk)
			}
		}
		slices.SortFunc(w, func(a, b task.Task) int {
			return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(b.Lambda, a.Lambda), cmp.Compare(b.ID, a.ID))
		})
		return w
	}
	check := func(what string, got, want []task.Task) {
		t.Helper()
		if !slices.Equal(refs(got), refs(want)) {
			t.Fatalf("%s: listed %v, want %v", what, refs(got), refs(want))
		}
		for i := range want {
			if d := diff(want[i], got[i]); len(d) > 0 {
				t.Errorf("%s: %s/%s differs from what was written:\n  %s", what, want[i].Lambda, want[i].ID, strings.Join(d, "\n  "))
			}
		}
	}
	check("both statuses", all(task.FailedParams{}), want(task.Failed...))
	check("dead only", all(task.FailedParams{Statuses: []task.Status{task.StatusDead}}), want(task.StatusDead))
	check("fatal only", all(task.FailedParams{Statuses: []task.Status{task.StatusFatalFailure}}), want(task.StatusFatalFailure))

	// Redriven, dead-2 leaves the list; failing again, it comes back at its new time.
	read, err := s.Get(ctx, l2, "dead-2")
	if err != nil {
		t.Fatal(err)
	}
	again, err := task.Redrive(read, task.RedriveOptions{}, at.Add(10*time.Second), task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Redrive(ctx, again, read.Version); err != nil {
		t.Fatal(err)
	}
	failed = slices.DeleteFunc(failed, func(tk task.Task) bool { return tk.ID == "dead-2" })
	check("after a redrive", all(task.FailedParams{}), want(task.Failed...))
	again.Payload = nil // Update writes no payload; the list reads the one Redrive wrote
	refailed := end(again, task.StatusFatalFailure, 11*time.Second)
	refailed.Payload = read.Payload
	failed[len(failed)-1] = refailed
	check("failed again", all(task.FailedParams{}), want(task.Failed...))

	for _, p := range []task.FailedParams{
		{Statuses: []task.Status{task.StatusSuccess}},
		{Statuses: []task.Status{task.StatusDead, "nope"}},
		{Cursor: "not a cursor"},
		{Limit: task.MaxListLimit + 1},
	} {
		if _, _, err := s.ListFailed(ctx, p); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("ListFailed %+v: %v, want ErrInvalid", p, err)
		}
	}
}

func refs(tasks []task.Task) []string {
	out := make([]string, len(tasks))
	for i, tk := range tasks {
		out[i] = tk.Lambda + "/" + tk.ID
	}
	return out
}
