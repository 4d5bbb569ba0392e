package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/task"
)

// recordingStore records the reads the consumer asks of the store.
type recordingStore struct {
	task.Store
	due   []task.DueParams
	lists []task.ListParams
}

func (r *recordingStore) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	r.due = append(r.due, p)
	return r.Store.Due(ctx, p)
}

func (r *recordingStore) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	r.lists = append(r.lists, p)
	return r.Store.List(ctx, p)
}

type tracedQuery struct {
	q    string
	args []any
}

// trace records every task query s runs until the test ends.
func trace(t *testing.T, s *Store) *[]tracedQuery {
	var qs []tracedQuery
	s.traced = func(q string, args []any) { qs = append(qs, tracedQuery{q, slices.Clone(args)}) }
	t.Cleanup(func() { s.traced = nil })
	return &qs
}

// checkPlan fails the test if SQLite would run q by scanning a table or an index from its start,
// or by sorting rows in a temporary B-tree: a cost that grows with the table, not with the limit.
// It returns the plan's steps.
func checkPlan(t *testing.T, s *Store, q string, args ...any) []string {
	t.Helper()
	plan := planOf(t, s, q, args...)
	shown := strings.Join(strings.Fields(strings.Replace(q, columns, "*", 1)), " ")
	for _, step := range plan {
		// A scan of json_each reads the list of ids the caller gave (getManySQL), not the table.
		if (strings.HasPrefix(step, "SCAN ") && !strings.HasPrefix(step, "SCAN json_each ")) || strings.Contains(step, "TEMP B-TREE") {
			t.Errorf("%s %v\n  runs as %q: %q scans or sorts", shown, args, plan, step)
		}
	}
	t.Logf("%s\n  runs as %q", shown, plan)
	return plan
}

// planOf returns the steps of SQLite's plan for q.
func planOf(t *testing.T, s *Store, q string, args ...any) []string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN %s: %v", q, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestSweepPlans runs the consumer's sweeps, with every kind of gate, and its Recover, and checks
// with EXPLAIN QUERY PLAN that no query they make of the store scans or sorts: each reads the
// index range it needs, in order, and stops at its limit.
func TestSweepPlans(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	l := task.Lambda{Name: "plans"}.WithDefaults()
	cfg := task.Config{EnqueueQuota: 10}.WithDefaults()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	// Due waiting tasks of every priority and collection, a running task that timed out, and
	// more enqueued tasks than one page of Recover's List, also after the lambda's drop gate took
	// its quota of them (not due yet: only the drop and Recover meet them).
	var tasks []task.Task
	for _, p := range l.Priorities {
		for _, c := range []string{"", "paused", "dropped"} {
			tk, err := task.New(task.Spec{Priority: p, Collection: c}, l, now.Add(-time.Minute), cfg)
			if err != nil {
				t.Fatal(err)
			}
			tasks = append(tasks, tk)
		}
	}
	running, err := task.New(task.Spec{}, l, now.Add(-time.Hour), cfg)
	if err == nil {
		if running, err = task.Enqueue(running, now.Add(-time.Hour), cfg); err == nil {
			running, err = task.Claim(running, task.NewLease(), now.Add(-time.Hour), cfg)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	tasks = append(tasks, running)
	for range task.MaxListLimit + 10*cfg.EnqueueQuota {
		tk, err := task.New(task.Spec{}, l, now, cfg)
		if err == nil {
			tk, err = task.Enqueue(tk, now, cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	for b := range slices.Chunk(tasks, task.MaxBatch) {
		if err := s.CreateBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}

	rec := &recordingStore{Store: s}
	cons := consumer.New(rec, memqueue.New(), consumer.Config{
		Lambdas: task.FixedCatalog{l}, Task: cfg, Now: func() time.Time { return now }, Jitter: func() float64 { return 0 },
	})
	queries := trace(t, s)
	sweep := func(g task.Gate) {
		t.Helper()
		g.Lambda, g.UpdatedAt = l.Name, now
		if err := s.SetGate(ctx, g); err != nil {
			t.Fatal(err)
		}
		if _, err := cons.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sweep(task.Gate{Collection: "paused", Mode: task.GateOpen})
	sweep(task.Gate{Collection: "paused", Mode: task.GatePause})
	sweep(task.Gate{Collection: "dropped", Mode: task.GateDrop})
	sweep(task.Gate{Mode: task.GateDrop})
	sweep(task.Gate{Mode: task.GateOpen})
	if _, err := cons.Recover(ctx); err != nil {
		t.Fatal(err)
	}

	// The sweeps made every kind of read the consumer has.
	seen := map[string]bool{}
	for _, p := range rec.due {
		switch {
		case slices.Equal(p.Statuses, task.Running):
			seen["running lane"] = true
		case slices.Equal(p.Statuses, []task.Status{task.StatusEnqueued}):
			seen["enqueued lane"] = true
		case p.Parked:
			seen[fmt.Sprintf("parked, one collection %t", p.Collection != "")] = true
		default:
			seen["waiting lane "+p.Priority] = true
		}
	}
	for _, p := range rec.lists {
		seen[fmt.Sprintf("list by status %t, collection %t, cursor %t", p.Status != "", p.Collection != "", p.Cursor != "")] = true
	}
	want := []string{"running lane", "enqueued lane", "parked, one collection true", "parked, one collection false",
		"list by status true, collection false, cursor false", "list by status true, collection false, cursor true"}
	for _, p := range l.Priorities {
		want = append(want, "waiting lane "+p)
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("no sweep made a read of kind %q; made %v", w, seen)
		}
	}

	if len(*queries) == 0 {
		t.Fatal("the store traced no query")
	}
	checked := map[string]bool{}
	for _, q := range *queries {
		if k := fmt.Sprint(q.q, q.args); !checked[k] {
			checked[k] = true
			checkPlan(t, s, q.q, q.args...)
		}
	}
	// The seek to the next parked collection, which runs outside query().
	checkPlan(t, s, nextParkedSQL, l.Name, "")
	// And each transition the sweeps write.
	checkPlan(t, s, updateSQL, updateArgs(tasks[0], tasks[0].Version, tasks[0].Status)...)
	checkPlan(t, s, statusSQL, tasks[0].Lambda, tasks[0].ID, tasks[0].Version)
	checkPlan(t, s, updateStateSQL, updateStateArgs(tasks[0], tasks[0].Version, tasks[0].Status)...)
}

// TestListPlans: every kind of list query, by status, collection, both or neither, first page
// or next, reads an index range in order and stops at its page (or its read budget): none scans
// or sorts, so a page costs its limit, not the lambda's tasks.
func TestListPlans(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	l := task.Lambda{Name: "lists"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var tasks []task.Task
	for i := range 300 {
		tk, err := task.New(task.Spec{Collection: fmt.Sprint("c", i%3)}, l, now.Add(time.Duration(i)*time.Millisecond), cfg)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	for b := range slices.Chunk(tasks, task.MaxBatch) {
		if err := s.CreateBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	queries := trace(t, s)
	for _, p := range []task.ListParams{
		{},
		{Status: task.StatusNew},
		{Collection: "c1"},
		{Status: task.StatusNew, Collection: "c1"},
	} {
		p.Lambda, p.Limit = l.Name, 10
		for range 2 { // the first page, then the next
			_, next, err := s.List(ctx, p)
			if err != nil || next == "" {
				t.Fatalf("List %+v: next %q, %v", p, next, err)
			}
			p.Cursor = next
		}
	}
	if len(*queries) < 8 {
		t.Fatalf("the store traced %d queries for 8 pages", len(*queries))
	}
	for _, q := range *queries {
		plan := checkPlan(t, s, q.q, q.args...)
		// A filter the index seek leaves out is checked row by row, over as many rows as the
		// lambda has: every filter of the WHERE clause must be part of the seek.
		_, where, _ := strings.Cut(q.q, " WHERE ")
		for _, col := range []string{"status", "collection"} {
			if strings.Contains(where, col+" = ?") && !strings.Contains(strings.Join(plan, " "), col+"=?") {
				t.Errorf("%s\n  runs as %q: the seek leaves out the filter on %s", q.q, plan, col)
			}
		}
	}
}

// TestMigrateDueIndex: a file made before the due lanes, with the sweep's index of then, is
// migrated when the store opens it. Its tasks stay due, and the sweep reads them by lane.
func TestMigrateDueIndex(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	l := task.Lambda{Name: "old"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	tk, err := task.New(task.Spec{}, l, now.Add(-time.Minute), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	// Back to the layout of before: the same tables, the old index instead of the lanes'.
	if _, err := s.w.ExecContext(ctx, `DROP INDEX tasks_due_lane;
		CREATE INDEX tasks_due ON tasks (lambda, next_trigger_at) WHERE next_trigger_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	defer s.Close()
	var indexes []string
	rows, err := s.r.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'tasks' AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, name)
	}
	rows.Close()
	if want := []string{"tasks_by_collection", "tasks_by_created", "tasks_by_status", "tasks_dead", "tasks_due_lane", "tasks_expiry", "tasks_fatal_failure", "tasks_parked"}; !slices.Equal(indexes, want) {
		t.Errorf("indexes after reopening: got %v, want %v", indexes, want)
	}
	queries := trace(t, s)
	due, err := s.Due(ctx, task.DueParams{Lambda: l.Name, Priority: tk.Priority, Before: now, Limit: 10,
		Statuses: []task.Status{task.StatusNew, task.StatusRetriableFailure}})
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || due[0].ID != tk.ID {
		t.Errorf("due after reopening: got %v, want %s", due, tk.ID)
	}
	for _, q := range *queries {
		checkPlan(t, s, q.q, q.args...)
	}
}

// TestLanes: the index's lane expression puts exactly the task.Running statuses in the running
// lane, enqueued tasks in theirs, and every other status in its priority's waiting lane, as
// dueLane expects; a parked task
// is in a lane of its own, which no lane dueLane names.
func TestLanes(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	for _, st := range task.Statuses {
		var got string
		if err := s.r.QueryRowContext(t.Context(), `SELECT `+laneSQL+` FROM (SELECT ? AS status, 'normal' AS priority, 0 AS parked)`, string(st)).Scan(&got); err != nil {
			t.Fatal(err)
		}
		want, _ := dueLane(task.DueParams{Statuses: []task.Status{st}, Priority: "normal"})
		if got != want {
			t.Errorf("status %s: in lane %q, dueLane looks in %q", st, got, want)
		}
		var parked string
		if err := s.r.QueryRowContext(t.Context(), `SELECT `+laneSQL+` FROM (SELECT ? AS status, 'normal' AS priority, 1 AS parked)`, string(st)).Scan(&parked); err != nil {
			t.Fatal(err)
		}
		if parked != "p" {
			t.Errorf("status %s, parked: in lane %q, want p", st, parked)
		}
	}
}

// TestMigrateEnqueuedLane: a file whose due index has the lanes of before enqueued tasks had one
// of their own is reindexed when the store opens it, and its enqueued tasks are read from their
// lane, by the index.
func TestMigrateEnqueuedLane(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	l := task.Lambda{Name: "old"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	tk, err := task.New(task.Spec{}, l, now.Add(-time.Hour), cfg)
	if err == nil {
		tk, err = task.Enqueue(tk, now.Add(-time.Hour), cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	const before = `(CASE WHEN parked = 1 THEN 'p' WHEN status IN ('claimed', 'processing') THEN 'r' ELSE 'w#' || priority END)`
	if _, err := s.w.ExecContext(ctx, `DROP INDEX tasks_due_lane;
		CREATE INDEX tasks_due_lane ON tasks (lambda, `+before+`, next_trigger_at, id, status, collection) WHERE next_trigger_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	defer s.Close()
	var index string
	if err := s.r.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'tasks_due_lane'`).Scan(&index); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(index, laneSQL) {
		t.Errorf("the due index after reopening is %q, want the lanes %s", index, laneSQL)
	}
	queries := trace(t, s)
	due, err := s.Due(ctx, task.DueParams{Lambda: l.Name, Statuses: []task.Status{task.StatusEnqueued}, Before: now, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || due[0].ID != tk.ID {
		t.Errorf("due after reopening: got %v, want %s", due, tk.ID)
	}
	for _, q := range *queries {
		if plan := checkPlan(t, s, q.q, q.args...); !slices.ContainsFunc(plan, func(step string) bool { return strings.Contains(step, "tasks_due_lane") }) {
			t.Errorf("the enqueued lane is not read through tasks_due_lane: %q", plan)
		}
	}
}

// TestFlowPlans: the reads of task flows (an upstream's edges, page by page; a task's upstreams;
// many tasks by id; the due lanes of pending and ended tasks, and the waiting sweep's read of a
// priority's waiting statuses with pending among them) read index ranges in order and stop at
// their limit: none scans or sorts.
func TestFlowPlans(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	l := task.Lambda{Name: "flows"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hub, err := task.New(task.Spec{ID: "hub"}, l, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tasks := []task.Task{hub}
	for i := range 300 {
		tk, err := task.New(task.Spec{After: []task.Ref{{ID: "hub"}, {ID: fmt.Sprint("other", i)}}}, l, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // ended, with downstreams to tell
			if tk, err = task.MarkDownstream(tk, now); err == nil {
				tk, err = task.Cancel(tk, now)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		tasks = append(tasks, tk)
	}
	for b := range slices.Chunk(tasks, task.MaxBatch) {
		if err := s.CreateBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	queries := trace(t, s)
	_, next, err := s.Downstreams(ctx, hub.Ref(), "", 10)
	if err == nil && next != "" {
		_, _, err = s.Downstreams(ctx, hub.Ref(), next, 10)
	}
	if err != nil || next == "" {
		t.Fatalf("Downstreams: next %q, %v", next, err)
	}
	refs := []task.Ref{{Lambda: l.Name, ID: "hub"}, {Lambda: "elsewhere", ID: "x"}}
	for _, tk := range tasks[1:20] {
		refs = append(refs, tk.Ref())
	}
	if _, err := s.GetMany(ctx, refs); err != nil {
		t.Fatal(err)
	}
	for _, p := range []task.DueParams{
		{Statuses: []task.Status{task.StatusPending}},
		{Statuses: task.Ended},
		{Statuses: []task.Status{task.StatusPending, task.StatusNew, task.StatusRetriableFailure}, Priority: l.DefaultPriority()},
	} {
		p.Lambda, p.Before, p.Limit = l.Name, now, 10
		if due, err := s.Due(ctx, p); err != nil || len(due) != 10 {
			t.Fatalf("Due %+v: %d tasks, %v; want 10", p, len(due), err)
		}
	}
	// Two pages of edges, GetMany's query of each lambda, one of each lane: pending, ended, and
	// pending and waiting of one priority.
	if len(*queries) != 8 {
		t.Errorf("the store traced %d queries, want 8", len(*queries))
	}
	for _, q := range *queries {
		checkPlan(t, s, q.q, q.args...)
	}
	checkPlan(t, s, upstreamsSQL, l.Name, tasks[1].ID, 0, 2)
}

// TestMigrateFlows: a file made before task flows, without their columns, their deps table and
// their lanes, is migrated when the store opens it: its tasks read as before, and a task with
// upstreams can be created, read whole and found in its lane.
func TestMigrateFlows(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	l := task.Lambda{Name: "old"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	old, err := task.New(task.Spec{}, l, now.Add(-time.Minute), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	// Back to the layout of before: no flow columns, no deps, the due lanes of then.
	const before = `(CASE WHEN parked = 1 THEN 'p' WHEN status IN ('claimed', 'processing') THEN 'r' WHEN status = 'enqueued' THEN 'e' ELSE 'w#' || priority END)`
	if _, err := s.w.ExecContext(ctx, `DROP TABLE deps;
		ALTER TABLE tasks DROP COLUMN after_count; ALTER TABLE tasks DROP COLUMN trigger_rule;
		ALTER TABLE tasks DROP COLUMN settled; ALTER TABLE tasks DROP COLUMN downstream;
		ALTER TABLE tasks DROP COLUMN notify_cursor; ALTER TABLE tasks DROP COLUMN cancel_requested;
		DROP INDEX tasks_due_lane;
		CREATE INDEX tasks_due_lane ON tasks (lambda, `+before+`, next_trigger_at, id, status, collection) WHERE next_trigger_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	defer s.Close()
	if got, err := s.Get(ctx, l.Name, old.ID); err != nil || got.Version != old.Version || got.AfterCount != 0 {
		t.Fatalf("Get of a task of before: %+v, %v", got, err)
	}
	down, err := task.New(task.Spec{After: []task.Ref{old.Ref()}, Trigger: task.TriggerAllDone}, l, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, down); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, l.Name, down.ID)
	if err != nil || !slices.Equal(got.After, down.After) || got.Trigger != task.TriggerAllDone {
		t.Fatalf("Get of a task with upstreams after migrating: %+v, %v", got, err)
	}
	queries := trace(t, s)
	due, err := s.Due(ctx, task.DueParams{Lambda: l.Name, Statuses: []task.Status{task.StatusPending}, Before: now, Limit: 10})
	if err != nil || len(due) != 1 || due[0].ID != down.ID {
		t.Fatalf("pending tasks due after migrating: %v, %v; want %s", ids(due), err, down.ID)
	}
	for _, q := range *queries {
		if plan := checkPlan(t, s, q.q, q.args...); !slices.ContainsFunc(plan, func(step string) bool { return strings.Contains(step, "tasks_due_lane") }) {
			t.Errorf("the pending lane is not read through tasks_due_lane: %q", plan)
		}
	}
}

func ids(tasks []task.Task) []string {
	out := make([]string, len(tasks))
	for i, tk := range tasks {
		out[i] = tk.ID
	}
	return out
}

// TestMigrateAttemptLogs: a file written before attempts kept their logs (no log columns) gets
// them when opened, and its tasks' attempts then keep their logs and where they are.
func TestMigrateAttemptLogs(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC().Truncate(time.Microsecond)
	tk, err := task.New(task.Spec{ID: "t"}, task.Lambda{Name: "old"}.WithDefaults(), now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `ALTER TABLE attempts DROP COLUMN log; ALTER TABLE attempts DROP COLUMN log_location;
		ALTER TABLE tasks DROP COLUMN log_location`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	defer s.Close()
	enq, err := task.Enqueue(tk, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := task.Claim(enq, "L", now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	claimed.LogLocation = &task.LogLocation{Group: "g", Stream: "s"}
	done, err := task.Succeed(claimed, "L", nil, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ next, prev task.Task }{{enq, tk}, {claimed, enq}, {done.Logged("ran\n"), claimed}} {
		if err := s.Update(ctx, w.next, w.prev.Version); err != nil {
			t.Fatalf("Update to %s after migrating: %v", w.next.Status, err)
		}
	}
	h, err := s.Attempts(ctx, "old", "t")
	if err != nil || len(h.Attempts) != 1 || h.Attempts[0].Log != "ran\n" || h.Attempts[0].LogLocation == nil || h.Attempts[0].LogLocation.Group != "g" {
		t.Fatalf("history after migrating: %+v, %v; want its attempt with its log and where its logs are", h.Attempts, err)
	}
}

// TestFailedPlans: a page of the failed tasks of every lambda, first or next, of one status or
// both, reads each status's index backwards, from its end or from the cursor, and stops at its
// page: it reads nothing but that index (which holds the status's tasks alone, so the first
// page's scan of it, in its order, stops at the limit too) and sorts nothing, so a page costs its
// limit, not the tasks failed or not.
func TestFailedPlans(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	cfg := task.Config{}.WithDefaults()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var tasks []task.Task
	for i := range 300 {
		l := task.Lambda{Name: fmt.Sprint("l", i%3)}.WithDefaults()
		tk, err := task.New(task.Spec{}, l, now.Add(time.Duration(i)*time.Millisecond), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // half failed for good, the rest new
			tk.Status, tk.NextTriggerAt = task.Failed[i%4/2], nil
		}
		tasks = append(tasks, tk)
	}
	for b := range slices.Chunk(tasks, task.MaxBatch) {
		if err := s.CreateBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	queries := trace(t, s)
	for _, p := range []task.FailedParams{{}, {Statuses: []task.Status{task.StatusDead}}} {
		p.Limit = 10
		for range 2 { // the first page, then the next
			_, next, err := s.ListFailed(ctx, p)
			if err != nil || next == "" {
				t.Fatalf("ListFailed %+v: next %q, %v", p, next, err)
			}
			p.Cursor = next
		}
	}
	if len(*queries) != 6 {
		t.Fatalf("the store traced %d queries for 4 pages of 3 statuses in all, want 6", len(*queries))
	}
	for _, q := range *queries {
		plan := planOf(t, s, q.q, q.args...)
		status := q.q[strings.Index(q.q, "status = '")+len("status = '"):]
		status = status[:strings.Index(status, "'")]
		scan, search := "SCAN tasks USING INDEX tasks_"+status, "SEARCH tasks USING INDEX tasks_"+status+" ((updated_at,lambda,id)<(?,?,?))"
		if len(plan) != 1 || plan[0] != scan && plan[0] != search {
			t.Errorf("%s\n  runs as %q, want %q or %q alone", q.q, plan, scan, search)
		}
	}
}
