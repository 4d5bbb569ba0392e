package storetest

import (
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// The conformance of task.FlowStore, and of the flow fields of Task (After, Trigger, Settled,
// Downstream, NotifyCursor) through the rest of task.Store.
//
// The tests call AddEdges with a task's edges before creating it, as the service does. A store
// may keep edges apart from tasks (DynamoDB) or derive them from the tasks' After (SQLite, whose
// AddEdges writes nothing): Downstreams must find the edges of created tasks either way, and the
// tests never rely on an edge of a task that was not created.

// Option changes how Exercise runs the suite.
type Option func(*config)

type config struct {
	fan  int  // upstreams of one task in FlowFanIn, downstreams of one task in FlowFanOut
	logs bool // the store keeps the attempts' logs (KeepsLogs)
	// transact writes a task in an app's own transaction (Transact); a backend without one
	// leaves it nil, and has no TransactCreate case.
	transact TxCreate
}

// KeepsLogs says the store keeps each attempt's log (task.Attempt.Log), as the embedded store
// does; a store without it keeps none, and the rest of the attempt all the same.
func KeepsLogs() Option { return func(c *config) { c.logs = true } }

// Fan sets how many upstreams one task has in the fan-in test, and how many downstreams one task
// has in the fan-out test: task.MaxAfter unless set. A store on an emulator may take fewer.
func Fan(n int) Option { return func(c *config) { c.fan = n } }

func flowCases(c config) []struct {
	name string
	fn   func(*testing.T, task.Store)
} {
	return []struct {
		name string
		fn   func(*testing.T, task.Store)
	}{
		{"FlowCreate", testFlowCreate},
		{"FlowCreateBatch", testFlowCreateBatch},
		{"FlowDownstreams", testFlowDownstreams},
		{"FlowUpstreams", testFlowUpstreams},
		{"FlowGetMany", testFlowGetMany},
		{"FlowAddUpstreams", testFlowAddUpstreams},
		{"FlowUpdate", testFlowUpdate},
		{"FlowDue", testFlowDue},
		{"FlowCounts", testFlowCounts},
		{"FlowFanIn", func(t *testing.T, s task.Store) { testFlowFanIn(t, s, c.fan) }},
		{"FlowFanOut", func(t *testing.T, s task.Store) { testFlowFanOut(t, s, c.fan) }},
	}
}

// waiting returns a pending task that waits for after, due at once for its check.
func waiting(lambda, id string, created time.Time, after ...task.Ref) task.Task {
	tk := plain(lambda, id, created)
	tk.Status, tk.After, tk.AfterCount = task.StatusPending, after, len(after)
	return tk
}

// addEdges records the edges of tasks, as the service does before it creates them.
func addEdges(t *testing.T, s task.Store, tasks ...task.Task) {
	t.Helper()
	var edges []task.Edge
	for _, tk := range tasks {
		edges = append(edges, tk.Edges()...)
	}
	if err := s.AddEdges(t.Context(), edges); err != nil {
		t.Fatalf("AddEdges: %v", err)
	}
}

// downstreams pages through up's edges, limit at a time, and returns them all.
func downstreams(t *testing.T, s task.Store, up task.Ref, limit, most int) []task.Edge {
	t.Helper()
	var all []task.Edge
	cursor := ""
	for page := 0; ; page++ {
		if page > most/limit+2 {
			t.Fatalf("Downstreams of %s, limit %d: still paging after %d pages, for at most %d edges", up, limit, page, most)
		}
		edges, next, err := s.Downstreams(t.Context(), up, cursor, limit)
		if err != nil {
			t.Fatalf("Downstreams of %s: %v", up, err)
		}
		if len(edges) > limit {
			t.Errorf("Downstreams of %s, limit %d: a page of %d edges", up, limit, len(edges))
		}
		all = append(all, edges...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

// sameEdges fails unless got holds the edges of want, each once, in any order.
func sameEdges(t *testing.T, what string, got, want []task.Edge) {
	t.Helper()
	key := func(e task.Edge) string { return fmt.Sprintf("%s<-%s#%d", e.Down, e.Up, e.Index) }
	seen := map[string]int{}
	for _, e := range got {
		seen[key(e)]++
	}
	wanted := map[string]int{}
	for _, e := range want {
		wanted[key(e)]++
	}
	if !maps.Equal(seen, wanted) {
		g, w := slices.Sorted(maps.Keys(seen)), slices.Sorted(maps.Keys(wanted))
		t.Errorf("%s: got edges %v (with counts %v), want %v", what, g, seen, w)
	}
}

// mustUpstreams fails unless down's After[from:from+limit] is want.
func mustUpstreams(t *testing.T, s task.Store, down task.Ref, from, limit int, want []task.Ref) {
	t.Helper()
	got, err := s.Upstreams(t.Context(), down, from, limit)
	if err != nil {
		t.Fatalf("Upstreams(%s, %d, %d): %v", down, from, limit, err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Upstreams(%s, %d, %d): got %v, want %v", down, from, limit, got, want)
	}
}

// diffState is diff without Payload and After, which GetMany, Due and List may leave out.
func diffState(want, got task.Task) []string {
	want.Payload, want.After, got.Payload, got.After = nil, nil, nil, nil
	return diff(want, got)
}

func update(t *testing.T, s task.Store, next task.Task, prev int64) {
	t.Helper()
	if err := s.Update(t.Context(), next, prev); err != nil {
		t.Fatalf("Update %s/%s from version %d: %v", next.Lambda, next.ID, prev, err)
	}
}

// testFlowCreate: a task's After, trigger rule and the rest come back from Get as they were
// created, upstreams of any lambda, and a create of a taken id changes none of it.
func testFlowCreate(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	up1, up2 := plain(l, "up1", now), plain(other, "up2", now)
	create(t, s, up1, up2)
	// An upstream that does not exist is the caller's business: the store keeps the ref.
	down := waiting(l, "down", now, up1.Ref(), up2.Ref(), task.Ref{Lambda: other, ID: "never"})
	down.Trigger, down.Collection, down.Payload = task.TriggerAllDone, "c", []byte(`{"x":1}`)
	addEdges(t, s, down)
	create(t, s, down)
	mustEqual(t, s, down)
	mustEqual(t, s, up1)

	again := waiting(l, "down", now.Add(time.Second), task.Ref{Lambda: l, ID: "someone-else"})
	addEdges(t, s, again)
	if err := s.Create(ctx, again); !errors.Is(err, task.ErrExists) {
		t.Fatalf("Create of a taken id with other upstreams: got %v, want ErrExists", err)
	}
	mustEqual(t, s, down)
	mustUpstreams(t, s, down.Ref(), 0, 10, down.After)
}

// testFlowCreateBatch: a batch's tasks may wait for one another (a diamond, across lambdas); a
// batch that fails leaves no upstream behind.
func testFlowCreateBatch(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	a := plain(l, "a", now)
	b := waiting(l, "b", now, a.Ref())
	c := waiting(other, "c", now, a.Ref())
	d := waiting(l, "d", now, b.Ref(), c.Ref())
	d.Trigger = task.TriggerAllSuccess
	batch := []task.Task{d, c, b, a} // downstreams first: the order within a batch is free
	addEdges(t, s, batch...)
	if err := s.CreateBatch(ctx, batch); err != nil {
		t.Fatalf("CreateBatch: %v", err)
	}
	for _, tk := range batch {
		mustEqual(t, s, tk)
	}
	sameEdges(t, "downstreams of a", downstreams(t, s, a.Ref(), 10, 2), []task.Edge{b.Edges()[0], c.Edges()[0]})
	sameEdges(t, "downstreams of b", downstreams(t, s, b.Ref(), 10, 1), d.Edges()[:1])
	sameEdges(t, "downstreams of c", downstreams(t, s, c.Ref(), 10, 1), d.Edges()[1:])
	sameEdges(t, "downstreams of d", downstreams(t, s, d.Ref(), 10, 0), nil)

	// A batch with a taken id creates none of its tasks, nor their upstreams. (Its edges were
	// not added: a store that keeps them apart would still show them, as task.FlowStore says.)
	x := waiting(l, "x", now, a.Ref(), d.Ref())
	if err := s.CreateBatch(ctx, []task.Task{x, plain(l, "b", now)}); !errors.Is(err, task.ErrExists) {
		t.Fatalf("CreateBatch with a taken id: got %v, want ErrExists", err)
	}
	if _, err := s.Get(ctx, l, "x"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("Get of a task of a failed batch: got %v, want ErrNotFound", err)
	}
	mustEqual(t, s, b)
	sameEdges(t, "downstreams of a after a failed batch", downstreams(t, s, a.Ref(), 10, 3), []task.Edge{b.Edges()[0], c.Edges()[0]})
	sameEdges(t, "downstreams of d after a failed batch", downstreams(t, s, d.Ref(), 10, 1), nil)
}

// testFlowDownstreams: an upstream's edges, of downstreams of several lambdas at several indexes,
// page by page with small limits: each once, in a stable order. Adding edges again changes
// nothing.
func testFlowDownstreams(t *testing.T, s task.Store) {
	l, other, third, now := lambdaName(), lambdaName(), lambdaName(), base()
	up := task.Ref{Lambda: l, ID: "up"} // an upstream need not exist
	var downs []task.Task
	var want []task.Edge
	for i, lambda := range []string{l, other, third, other, l, third, other} {
		after := []task.Ref{up}
		for range i % 3 { // up at index 0, 1 or 2
			after = append([]task.Ref{{Lambda: third, ID: fmt.Sprintf("first%d", len(after))}}, after...)
		}
		tk := waiting(lambda, fmt.Sprintf("d%d", i), now, after...)
		downs = append(downs, tk)
		want = append(want, tk.Edges()[i%3])
	}
	// A task that waits for another task of the same id in another lambda is not up's downstream.
	decoy := waiting(l, "decoy", now, task.Ref{Lambda: other, ID: "up"})
	addEdges(t, s, append(downs, decoy)...)
	addEdges(t, s, downs...) // again: no duplicates
	create(t, s, append(downs, decoy)...)
	addEdges(t, s, downs[2:5]...) // and once the tasks exist

	for _, limit := range []int{1, 2, 3, 100} {
		first := downstreams(t, s, up, limit, len(want))
		sameEdges(t, fmt.Sprintf("downstreams, limit %d", limit), first, want)
		if again := downstreams(t, s, up, limit, len(want)); !slices.Equal(again, first) {
			t.Errorf("downstreams, limit %d: the order is not stable: first %v, then %v", limit, first, again)
		}
	}
	if edges, next, err := s.Downstreams(t.Context(), task.Ref{Lambda: l, ID: "lonely"}, "", 10); err != nil || len(edges) > 0 || next != "" {
		t.Errorf("Downstreams of a task without any: got %v, next %q, %v; want none", edges, next, err)
	}
	for _, cursor := range []string{"not a cursor!", "%%%", "\x00"} {
		if _, _, err := s.Downstreams(t.Context(), up, cursor, 10); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("Downstreams with cursor %q: got %v, want ErrInvalid", cursor, err)
		}
	}
}

// testFlowUpstreams: Upstreams reads a range of After, shorter at its end.
func testFlowUpstreams(t *testing.T, s task.Store) {
	l, other, now := lambdaName(), lambdaName(), base()
	after := []task.Ref{{Lambda: l, ID: "u0"}, {Lambda: other, ID: "u1"}, {Lambda: l, ID: "u2"}, {Lambda: other, ID: "u3"}, {Lambda: l, ID: "u4"}}
	down := waiting(l, "down", now, after...)
	lone := plain(l, "lone", now)
	addEdges(t, s, down)
	create(t, s, down, lone)
	for _, c := range []struct {
		from, limit int
		want        []task.Ref
	}{
		{0, 2, after[:2]},
		{2, 2, after[2:4]},
		{4, 2, after[4:]},
		{1, 3, after[1:4]},
		{0, 100, after},
		{5, 2, nil},
		{9, 3, nil},
	} {
		mustUpstreams(t, s, down.Ref(), c.from, c.limit, c.want)
	}
	mustUpstreams(t, s, lone.Ref(), 0, 10, nil)
}

// testFlowGetMany: GetMany reads any number of tasks of several lambdas in the order asked, a zero
// Task for each that does not exist, with their state and flow fields.
func testFlowGetMany(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	const n = 200
	byRef := map[task.Ref]task.Task{}
	var batch []task.Task
	for i := range n {
		lambda := l
		if i%4 == 3 {
			lambda = other
		}
		tk := plain(lambda, fmt.Sprintf("g%03d", i), now.Add(time.Duration(i)*time.Microsecond))
		switch i % 5 {
		case 1:
			tk.Status, tk.NextTriggerAt, tk.Result = task.StatusSuccess, nil, []byte(fmt.Sprintf(`{"n":%d}`, i))
		case 2:
			tk.Status, tk.NextTriggerAt, tk.Error = task.StatusFatalFailure, nil, fmt.Sprintf("failed %d", i)
		case 3:
			tk = waiting(lambda, tk.ID, tk.CreatedAt, task.Ref{Lambda: l, ID: "g000"}, task.Ref{Lambda: other, ID: "g003"})
			tk.Trigger, tk.Settled = task.TriggerAllDone, task.Bitmap{1}
		case 4:
			tk.Status, tk.NextTriggerAt, tk.Downstream, tk.NotifyCursor = task.StatusSuccess, ptr(now), true, "cursor"
		}
		tk.Payload = []byte(`{"payload":true}`)
		byRef[tk.Ref()] = tk
		batch = append(batch, tk)
	}
	for b := range slices.Chunk(batch, task.MaxBatch) {
		addEdges(t, s, b...)
		if err := s.CreateBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	var refs []task.Ref
	for _, tk := range batch {
		refs = append(refs, tk.Ref())
	}
	for i := range 50 { // missing: ids never used, and ids of the other lambda
		missing := task.Ref{Lambda: l, ID: fmt.Sprintf("missing%d", i)}
		if i%2 == 1 {
			missing = task.Ref{Lambda: other, ID: fmt.Sprintf("g%03d", i*4)}
		}
		refs = append(refs, missing)
	}
	rng := mrand.New(mrand.NewPCG(12, 250))
	rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })

	got, err := s.GetMany(ctx, refs)
	if err != nil {
		t.Fatalf("GetMany of %d refs: %v", len(refs), err)
	}
	if len(got) != len(refs) {
		t.Fatalf("GetMany of %d refs: got %d tasks", len(refs), len(got))
	}
	for i, r := range refs {
		want, ok := byRef[r]
		switch {
		case !ok && got[i].ID != "":
			t.Errorf("GetMany[%d]: %s does not exist, got task %s/%s", i, r, got[i].Lambda, got[i].ID)
		case ok:
			if d := diffState(want, got[i]); len(d) > 0 {
				t.Errorf("GetMany[%d]: %s differs from what was written:\n  %s", i, r, strings.Join(d, "\n  "))
			}
		}
	}
	if got, err := s.GetMany(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("GetMany of no refs: got %v, %v", got, err)
	}
}

// testFlowAddUpstreams: AddUpstreams writes the task and its new upstreams together, if the
// version is still the one read; a stale one writes nothing.
func testFlowAddUpstreams(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	a, b, c, d, e := task.Ref{Lambda: l, ID: "a"}, task.Ref{Lambda: other, ID: "b"}, task.Ref{Lambda: l, ID: "c"}, task.Ref{Lambda: other, ID: "d"}, task.Ref{Lambda: l, ID: "e"}
	down := waiting(l, "down", now, a, b)
	addEdges(t, s, down)
	create(t, s, down)

	read, err := s.Get(ctx, l, "down")
	if err != nil {
		t.Fatal(err)
	}
	added, err := task.AddUpstreams(read, []task.Ref{c, d}, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddEdges(ctx, added.Edges()[2:]); err != nil {
		t.Fatal(err)
	}
	if err := s.AddUpstreams(ctx, added, read.Version, 2); err != nil {
		t.Fatalf("AddUpstreams: %v", err)
	}
	mustEqual(t, s, added)
	mustUpstreams(t, s, down.Ref(), 2, 10, []task.Ref{c, d})
	sameEdges(t, "downstreams of c", downstreams(t, s, c, 10, 1), added.Edges()[2:3])
	sameEdges(t, "downstreams of d", downstreams(t, s, d, 10, 1), added.Edges()[3:4])

	// A writer that read the task before is too late, and writes neither task nor upstream,
	// though its upstream would take the index of one just added.
	stale, err := task.AddUpstreams(read, []task.Ref{e}, now.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddUpstreams(ctx, stale, read.Version, 2); !errors.Is(err, task.ErrConflict) {
		t.Fatalf("AddUpstreams from a stale version: got %v, want ErrConflict", err)
	}
	mustEqual(t, s, added)
	mustUpstreams(t, s, down.Ref(), 0, 10, []task.Ref{a, b, c, d})

	// Of writers racing from one version, exactly one adds its upstreams.
	const racers = 10
	current, err := s.Get(ctx, l, "down")
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, racers)
	tries := make([]task.Task, racers)
	var wg sync.WaitGroup
	for i := range racers {
		tries[i], err = task.AddUpstreams(current, []task.Ref{{Lambda: other, ID: fmt.Sprintf("racer%d", i)}}, now.Add(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = s.AddUpstreams(ctx, tries[i], current.Version, current.AfterCount) })
	}
	wg.Wait()
	winner := oneWinner(t, "racer", "added upstreams", errs)
	mustEqual(t, s, tries[winner])

	// A task without upstreams takes its first ones, and is pending again.
	plainTask := plain(l, "plain", now)
	create(t, s, plainTask)
	first, err := task.AddUpstreams(plainTask, []task.Ref{a}, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	addEdges(t, s, first)
	if err := s.AddUpstreams(ctx, first, plainTask.Version, 0); err != nil {
		t.Fatalf("AddUpstreams to a task without upstreams: %v", err)
	}
	mustEqual(t, s, first)
	due, err := s.Due(ctx, task.DueParams{Lambda: l, Statuses: []task.Status{task.StatusPending}, Before: now.Add(3 * time.Second), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(due); !slices.Equal(got, []string{"plain", "down"}) {
		t.Errorf("pending tasks due after AddUpstreams: got %v, want [plain down]", got)
	}

	// AddUpstreams never creates.
	ghost := waiting(l, "ghost", now, a)
	ghost.Version = 2
	if err := s.AddUpstreams(ctx, ghost, 1, 0); !errors.Is(err, task.ErrConflict) {
		t.Errorf("AddUpstreams to a missing task: got %v, want ErrConflict", err)
	}
	if _, err := s.Get(ctx, l, "ghost"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("Get after AddUpstreams to a missing task: got %v, want ErrNotFound", err)
	}
}

// testFlowUpdate: Update writes the flow fields a transition changes (Settled, Downstream,
// NotifyCursor) and keeps After; List and Due return them too.
func testFlowUpdate(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, now := lambdaName(), base()
	var after []task.Ref
	for i := range 10 { // a bitmap of two bytes
		after = append(after, task.Ref{Lambda: l, ID: fmt.Sprintf("u%d", i)})
	}
	down := waiting(l, "down", now, after...)
	up := plain(l, "up", now)
	addEdges(t, s, down)
	create(t, s, down, up)

	settled, err := task.Settle(down, []task.Settled{
		{Index: 0, Up: after[0], Status: task.StatusSuccess},
		{Index: 9, Up: after[9], Status: task.StatusSuccess},
	}, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, settled, down.Version)
	mustEqual(t, s, settled)

	marked, err := task.MarkDownstream(up, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, marked, up.Version)
	mustEqual(t, s, marked)
	cancelled, err := task.Cancel(marked, now.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, cancelled, marked.Version)
	telling, err := task.Notified(cancelled, "some-cursor", false, now.Add(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, telling, cancelled.Version)
	mustEqual(t, s, telling)

	// List and Due return the flow fields (After they may leave out).
	listed, _, err := s.List(ctx, task.ListParams{Lambda: l})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]task.Task{"down": settled, "up": telling}
	if len(listed) != len(want) {
		t.Fatalf("List: got %v, want [down up]", ids(listed))
	}
	for _, tk := range listed {
		if d := diffState(want[tk.ID], tk); len(d) > 0 {
			t.Errorf("List: %s differs from what was written:\n  %s", tk.ID, strings.Join(d, "\n  "))
		}
	}
	for _, st := range [][]task.Status{{task.StatusPending}, task.Ended} {
		due, err := s.Due(ctx, task.DueParams{Lambda: l, Statuses: st, Before: now.Add(time.Hour), Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(due) != 1 {
			t.Fatalf("Due %v: got %v, want one task", st, ids(due))
		}
		if d := diffState(want[due[0].ID], due[0]); len(d) > 0 {
			t.Errorf("Due %v: %s differs from what was written:\n  %s", st, due[0].ID, strings.Join(d, "\n  "))
		}
	}

	told, err := task.Notified(telling, "", true, now.Add(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, told, telling.Version)
	mustEqual(t, s, told)
}

// testFlowDue: pending tasks with a trigger (their check) and ended tasks with a trigger (their
// downstreams to tell) are each read on their own; neither shows among the waiting tasks.
func testFlowDue(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	x := task.Ref{Lambda: other, ID: "x"}
	pend := func(id string, trigger time.Duration, prio string) task.Task {
		tk := waiting(l, id, now.Add(-time.Hour), x)
		tk.Priority, tk.NextTriggerAt = prio, ptr(now.Add(trigger))
		return tk
	}
	p1, p2, future := pend("p1", -2*time.Minute, "normal"), pend("p2", -time.Minute, "high"), pend("future", time.Hour, "normal")
	checked, err := task.Checked(pend("checked", -3*time.Minute, "normal"), now.Add(-3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	fresh := plain(l, "new", now.Add(-4*time.Minute))
	elsewhere := waiting(other, "p1", now.Add(-time.Hour), x)
	elsewhere.NextTriggerAt = ptr(now.Add(-time.Hour))
	running := plain(l, "running", now.Add(-time.Hour))
	running.Status, running.NextTriggerAt = task.StatusProcessing, ptr(now.Add(-5*time.Minute))

	// Ended tasks: with downstreams (a trigger until they are told) or without (none).
	ended := func(id string, at time.Duration, mark bool, end func(task.Task, time.Time) (task.Task, error)) task.Task {
		tk := plain(l, id, now.Add(-time.Hour))
		var err error
		if mark {
			tk, err = task.MarkDownstream(tk, now.Add(-time.Hour))
		}
		if err == nil {
			tk, err = end(tk, now.Add(at))
		}
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	e1 := ended("e1", -90*time.Second, true, task.Cancel)
	e2 := ended("e2", -30*time.Second, true, task.Drop)
	quiet := ended("quiet", -time.Minute, false, task.Cancel)
	// A task that ended before a downstream marked it.
	late, err := task.MarkDownstream(ended("late", -time.Hour, false, task.Cancel), now.Add(-45*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	failed, err := task.Settle(pend("failed", -time.Hour, "normal"), []task.Settled{{Index: 0, Up: x, Status: task.StatusDead}}, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	failed, err = task.MarkDownstream(failed, now.Add(-20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	futureEnd := ended("future-end", time.Hour, true, task.Cancel)
	create(t, s, p1, p2, future, checked, fresh, elsewhere, running, e1, e2, quiet, late, failed, futureEnd)

	for _, c := range []struct {
		name string
		p    task.DueParams
		want []string
	}{
		{"pending", task.DueParams{Statuses: []task.Status{task.StatusPending}}, []string{"p1", "p2"}},
		{"pending, limit", task.DueParams{Statuses: []task.Status{task.StatusPending}, Limit: 1}, []string{"p1"}},
		{"pending, later", task.DueParams{Statuses: []task.Status{task.StatusPending}, Before: now.Add(2 * time.Hour)}, []string{"p1", "p2", "future"}},
		{"ended", task.DueParams{Statuses: task.Ended}, []string{"e1", "late", "e2", "failed"}},
		{"ended, limit", task.DueParams{Statuses: task.Ended, Limit: 2}, []string{"e1", "late"}},
		{"ended, later", task.DueParams{Statuses: task.Ended, Before: now.Add(2 * time.Hour)}, []string{"e1", "late", "e2", "failed", "future-end"}},
		{"one ended status", task.DueParams{Statuses: []task.Status{task.StatusCancelled}}, []string{"e1", "late"}},
		{"waiting, one priority", task.DueParams{Statuses: []task.Status{task.StatusNew, task.StatusRetriableFailure}, Priority: "normal"}, []string{"new"}},
		{"running", task.DueParams{Statuses: task.Running}, []string{"running"}},
		{"every status", task.DueParams{Statuses: task.Statuses}, []string{"running", "new", "p1", "e1", "p2", "late", "e2", "failed"}},
	} {
		p := c.p
		p.Lambda = l
		if p.Before.IsZero() {
			p.Before = now
		}
		if p.Limit == 0 {
			p.Limit = 100
		}
		tasks, err := s.Due(ctx, p)
		if err != nil {
			t.Fatalf("%s: Due: %v", c.name, err)
		}
		if got := ids(tasks); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// testFlowCounts: upstream_failed is counted like any status.
func testFlowCounts(t *testing.T, s task.Store) {
	ctx := t.Context()
	l, now := lambdaName(), base()
	up := task.Ref{Lambda: l, ID: "up"}
	a, b := waiting(l, "a", now, up), waiting(l, "b", now, up)
	addEdges(t, s, a, b)
	create(t, s, a, b)
	failed, err := task.Settle(a, []task.Settled{{Index: 0, Up: up, Status: task.StatusFatalFailure}}, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, failed, a.Version)
	mustEqual(t, s, failed)
	got, err := s.Counts(ctx, l)
	if want := map[task.Status]int{task.StatusUpstreamFailed: 1, task.StatusPending: 1}; err != nil || !maps.Equal(got, want) {
		t.Errorf("Counts: got %v, %v; want %v", got, err, want)
	}
}

// testFlowFanIn: one task waits for n upstreams of two lambdas, in an order that is not theirs:
// Get and Upstreams return them all, in order.
func testFlowFanIn(t *testing.T, s task.Store, n int) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	rng := mrand.New(mrand.NewPCG(10, uint64(n)))
	after := make([]task.Ref, n)
	for i, k := range rng.Perm(n) {
		lambda := l
		if k%2 == 1 {
			lambda = other
		}
		after[i] = task.Ref{Lambda: lambda, ID: fmt.Sprintf("up%05d", k)}
	}
	down := waiting(l, "fan-in", now, after...)
	create(t, s, down)
	got, err := s.Get(ctx, l, down.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.AfterCount != n || !slices.Equal(got.After, after) {
		t.Fatalf("Get of a task with %d upstreams: AfterCount %d, %d upstreams, in order %t", n, got.AfterCount, len(got.After), slices.Equal(got.After, after))
	}
	mustUpstreams(t, s, down.Ref(), n-10, 100, after[n-10:])
	mustUpstreams(t, s, down.Ref(), n/2, 3, after[n/2:n/2+3])
	var paged []task.Ref
	for from := 0; from < n; from += 1000 {
		page, err := s.Upstreams(ctx, down.Ref(), from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page...)
	}
	if !slices.Equal(paged, after) {
		t.Errorf("Upstreams a thousand at a time: got %d upstreams, in order %t; want %d", len(paged), slices.Equal(paged, after), n)
	}
	many, err := s.GetMany(ctx, []task.Ref{down.Ref()})
	if err != nil || len(many) != 1 || many[0].AfterCount != n {
		t.Errorf("GetMany of a task with %d upstreams: %v; want AfterCount %d", err, many, n)
	}
}

// testFlowFanOut: n tasks of two lambdas wait for one: Downstreams pages through them all.
func testFlowFanOut(t *testing.T, s task.Store, n int) {
	ctx := t.Context()
	l, other, now := lambdaName(), lambdaName(), base()
	hub := plain(l, "hub", now)
	create(t, s, hub)
	var want []task.Edge
	var batch []task.Task
	for i := range n {
		lambda := l
		if i%3 == 0 {
			lambda = other
		}
		down := waiting(lambda, fmt.Sprintf("down%05d", i), now, hub.Ref())
		want = append(want, down.Edges()...)
		if batch = append(batch, down); len(batch) == task.MaxBatch || i == n-1 {
			addEdges(t, s, batch...)
			if err := s.CreateBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	sameEdges(t, fmt.Sprintf("downstreams of a task with %d", n), downstreams(t, s, hub.Ref(), 1000, n), want)
}
