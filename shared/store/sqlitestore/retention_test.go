package sqlitestore

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// t0 is the retention tests' clock: a day before it is "expired", an hour before it is not.
var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// aged is a task of lambda "ret" in status s, last written at updated, with trigger (nil: none).
func aged(id string, s task.Status, updated time.Time, trigger *time.Time) task.Task {
	return task.Task{
		Lambda: "ret", ID: id, Priority: "default", Status: s, Payload: []byte(`{"p":1}`),
		MaxAttempts: 3, RunAt: updated.Add(-time.Minute), CreatedAt: updated.Add(-time.Minute),
		UpdatedAt: updated, NextTriggerAt: trigger, Version: 1, Spec: "spec",
	}
}

func ptr(t time.Time) *time.Time { return &t }

// remaining is the ids of lambda "ret" still stored, of those given.
func remaining(t *testing.T, s *Store, ids ...string) []string {
	t.Helper()
	var left []string
	for _, id := range ids {
		_, err := s.Get(t.Context(), "ret", id)
		switch {
		case err == nil:
			left = append(left, id)
		case !errors.Is(err, task.ErrNotFound):
			t.Fatal(err)
		}
	}
	return left
}

// TestPruneExpired: a pass deletes the finished tasks last written before the cutoff, whatever
// way they finished, and nothing else: not a finished task written since, not an unfinished task
// however old (one waiting for its upstreams has no trigger either), not a finished task whose
// downstreams are still to be told.
func TestPruneExpired(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	old, recent := t0.Add(-24*time.Hour), t0.Add(-time.Hour)
	var expired []string
	var tasks []task.Task
	for _, st := range task.Ended {
		id := "old-" + string(st)
		expired = append(expired, id)
		tasks = append(tasks, aged(id, st, old, nil), aged("recent-"+string(st), st, recent, nil))
	}
	kept := []task.Task{
		aged("waiting-for-upstreams", task.StatusPending, old, nil),
		aged("new", task.StatusNew, old, ptr(old)),
		aged("enqueued", task.StatusEnqueued, old, ptr(old)),
		aged("processing", task.StatusProcessing, old, ptr(old)),
		aged("retriable", task.StatusRetriableFailure, old, ptr(old)),
		aged("downstreams-to-tell", task.StatusSuccess, old, ptr(old)),
	}
	kept[5].Downstream = true
	tasks = append(tasks, kept...)
	if err := s.CreateBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	all := make([]string, len(tasks))
	for i, tk := range tasks {
		all[i] = tk.ID
	}

	n, err := s.Prune(ctx, t0.Add(-12*time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(expired) {
		t.Errorf("pruned %d tasks, want %d", n, len(expired))
	}
	if left := remaining(t, s, expired...); len(left) > 0 {
		t.Errorf("expired finished tasks left: %v", left)
	}
	want := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return slices.Contains(expired, id) })
	if left := remaining(t, s, all...); !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	// The counts lose the pruned tasks: an old success is gone, a recent one stays counted.
	counts, err := s.Counts(ctx, "ret")
	if err != nil {
		t.Fatal(err)
	}
	if counts[task.StatusSuccess] != 2 || counts[task.StatusFatalFailure] != 1 {
		t.Errorf("counts after the prune: %v, want 2 successes (recent, downstreams to tell) and 1 fatal failure", counts)
	}
	if n, err := s.Prune(ctx, t0.Add(-12*time.Hour), 100); err != nil || n != 0 {
		t.Errorf("a second pass pruned %d (%v), want 0", n, err)
	}
}

// TestPruneBounded: a pass deletes at most its limit, the oldest first.
func TestPruneBounded(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	var tasks []task.Task
	var ids []string
	for i := range 25 {
		id := fmt.Sprintf("t%02d", i)
		ids = append(ids, id)
		// Written in the reverse of their ids' order: the pass goes by the time of the last write.
		tasks = append(tasks, aged(id, task.StatusSuccess, t0.Add(-time.Duration(100-i)*time.Hour), nil))
	}
	if err := s.CreateBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	for pass, want := range []int{10, 10, 5, 0} {
		n, err := s.Prune(ctx, t0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("pass %d pruned %d, want %d", pass, n, want)
		}
		pruned := min(len(ids), 10*(pass+1))
		if left := remaining(t, s, ids...); !slices.Equal(left, ids[pruned:]) {
			t.Fatalf("after pass %d: left %v, want %v", pass, left, ids[pruned:])
		}
	}
	if _, err := s.Prune(ctx, t0, 0); err == nil {
		t.Error("a prune with limit 0 was accepted")
	}
}

// TestPruneFlow: a finished upstream whose downstream is still to be told stays until it is
// told; then it is pruned like any task, and its downstream, which still names it, reads it as
// gone (GetMany's zero task: task.InputGone). A pruned downstream takes its upstreams' rows with
// it; its upstream's edges to other downstreams stay.
func TestPruneFlow(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	old := t0.Add(-24 * time.Hour)
	up := aged("up", task.StatusSuccess, old, ptr(old))
	up.Downstream = true
	down := aged("down", task.StatusPending, old, nil)
	down.After = []task.Ref{up.Ref()}
	down.AfterCount = 1
	doneDown := aged("done-down", task.StatusSuccess, old, nil)
	doneDown.After = []task.Ref{up.Ref()}
	doneDown.AfterCount = 1
	if err := s.CreateBatch(ctx, []task.Task{up, down, doneDown}); err != nil {
		t.Fatal(err)
	}

	if _, err := s.Prune(ctx, t0, 100); err != nil {
		t.Fatal(err)
	}
	if left := remaining(t, s, "up", "down", "done-down"); !slices.Equal(left, []string{"up", "down"}) {
		t.Fatalf("left %v, want the upstream with downstreams to tell and the pending downstream", left)
	}
	edges, _, err := s.Downstreams(ctx, up.Ref(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(edges) != 1 || edges[0].Down.ID != "down" {
		t.Errorf("the upstream's edges after its done downstream was pruned: %v, want the one to down", edges)
	}

	// Told: its trigger cleared, a day ago.
	told, err := task.Notified(up, "", true, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, told, up.Version); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, t0, 100); err != nil || n != 1 {
		t.Fatalf("pruned %d (%v) once the upstream was told, want 1", n, err)
	}
	got, err := s.GetMany(ctx, []task.Ref{up.Ref()})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].ID != "" {
		t.Errorf("the pruned upstream reads as %s %s, want gone", got[0].ID, got[0].Status)
	}
	d, err := s.Get(ctx, "ret", "down")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.After, []task.Ref{up.Ref()}) {
		t.Errorf("the downstream's upstreams after its upstream was pruned: %v", d.After)
	}
}

// TestPruningJob: a store opened with a retention prunes on its own, a bounded batch a pass, until
// only what must stay is left.
func TestPruningJob(t *testing.T) {
	ctx := t.Context()
	s, err := OpenWith(filepath.Join(t.TempDir(), "atf.db"), Options{
		Retention: 12 * time.Hour, PruneInterval: 10 * time.Millisecond, PruneBatch: 3,
		Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var tasks []task.Task
	for i := range 10 {
		tasks = append(tasks, aged(fmt.Sprint("done", i), task.StatusSuccess, t0.Add(-24*time.Hour), nil))
	}
	tasks = append(tasks, aged("running", task.StatusProcessing, t0.Add(-24*time.Hour), ptr(t0)), aged("recent", task.StatusSuccess, t0, nil))
	if err := s.CreateBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute) // generous: the job needs four passes
	for {
		counts, err := s.Counts(ctx, "ret")
		if err != nil {
			t.Fatal(err)
		}
		if counts[task.StatusSuccess] == 1 && counts[task.StatusProcessing] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job left %v, want one success and the running task", counts)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if left := remaining(t, s, "running", "recent"); len(left) != 2 {
		t.Errorf("left %v, want the running and the recent task", left)
	}
}

// TestPrunePlans: a pass reads the expiry index in order and stops at its batch, and deletes by
// key, however many tasks the table holds.
func TestPrunePlans(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	plan := checkPlan(t, s, expiredSQL, t0.UnixNano(), 500)
	if !slices.ContainsFunc(plan, func(step string) bool { return step == "SEARCH tasks USING INDEX tasks_expiry (updated_at<?)" }) {
		t.Errorf("the pass's read runs as %q, not on tasks_expiry", plan)
	}
	checkPlan(t, s, deleteExpiredSQL, "ret", "x")
	checkPlan(t, s, deleteUpstreamsSQL, "ret", "x")
}

// TestMigrateExpiry: a file whose expiry index names other finished statuses (made before a
// status was added) gets the index of this version when opened.
func TestMigrateExpiry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	for _, q := range []string{`DROP INDEX tasks_expiry`, `CREATE INDEX tasks_expiry ON tasks (updated_at) WHERE next_trigger_at IS NULL AND status IN ('success')`} {
		if _, err := s.w.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	var def string
	if err := s.r.QueryRow(`SELECT sql FROM sqlite_master WHERE name = 'tasks_expiry'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if def != strings.TrimSuffix(strings.Replace(expirySchema, "IF NOT EXISTS ", "", 1), ";") {
		t.Errorf("the expiry index after reopening: %s", def)
	}
}

// TestGrownPlans: finished tasks, however many, are in none of the index ranges the consumer's
// sweep reads, and a claim reads and writes its task by key: with a table full of finished tasks
// every query of a sweep, and of a claim, seeks the range or the row it needs.
func TestGrownPlans(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	l := task.Lambda{Name: "ret"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	var finished []task.Task
	for i := range 1000 {
		tk := aged(fmt.Sprintf("done%04d", i), task.StatusSuccess, t0.Add(-time.Duration(i)*time.Second), nil)
		tk.Priority = l.DefaultPriority()
		finished = append(finished, tk)
	}
	for b := range slices.Chunk(finished, task.MaxBatch) {
		if err := s.CreateBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	waiting, err := task.New(task.Spec{}, l, t0.Add(-time.Minute), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, waiting); err != nil {
		t.Fatal(err)
	}

	queries := trace(t, s)
	for _, p := range []task.DueParams{
		{Statuses: task.Running},
		{Statuses: []task.Status{task.StatusEnqueued}},
		{Statuses: []task.Status{task.StatusPending, task.StatusSuccess}}, // the flow lane: pending, and ended with downstreams to tell
		{Statuses: []task.Status{task.StatusNew, task.StatusRetriableFailure}, Priority: l.DefaultPriority()},
	} {
		p.Lambda, p.Before, p.Limit = l.Name, t0, 100
		due, err := s.Due(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(due) > 1 || (len(due) == 1 && due[0].ID != waiting.ID) {
			t.Errorf("Due(%v) returned %v", p.Statuses, ids(due))
		}
	}
	for _, q := range *queries {
		plan := checkPlan(t, s, q.q, q.args...)
		if !slices.ContainsFunc(plan, func(step string) bool { return strings.Contains(step, "USING INDEX tasks_due_lane") }) {
			t.Errorf("a due query runs as %q, not on the due lanes' index", plan)
		}
	}
	// A claim: the task read by key, then written by key over its version.
	for _, q := range []struct {
		q    string
		args []any
	}{
		{`SELECT ` + columns + ` FROM tasks WHERE lambda = ? AND id = ?`, []any{l.Name, waiting.ID}},
		{updateSQL, updateArgs(waiting, waiting.Version, waiting.Status)},
		{statusSQL, []any{l.Name, waiting.ID, waiting.Version}},
	} {
		plan := checkPlan(t, s, q.q, q.args...)
		if len(plan) != 1 || !strings.Contains(plan[0], "USING INDEX sqlite_autoindex_tasks_1 (lambda=? AND id=?)") {
			t.Errorf("a claim's query runs as %q, not by key", plan)
		}
	}
}

// TestPrunableStatuses: the expiry index names exactly the finished statuses.
func TestPrunableStatuses(t *testing.T) {
	_, list, _ := strings.Cut(prunableSQL, "status IN (")
	list, _, _ = strings.Cut(list, ")")
	var named []task.Status
	for q := range strings.SplitSeq(list, ", ") {
		named = append(named, task.Status(strings.Trim(q, "'")))
	}
	if !slices.Equal(named, task.Ended) {
		t.Errorf("tasks_expiry names %v, want the finished statuses %v", named, task.Ended)
	}
}
