package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/store/storetest"
	"github.com/openatf/atf/shared/task"
)

// open opens the store at path, and checks its counts when the test ends (checkCounts).
func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkCounts(t, path) })
	return s
}

// checkCounts checks that the file's counts by status (task_counts) are those of its rows, as
// one snapshot read on a connection of its own: the store may be open or closed.
func checkCounts(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	read := func(q string) map[string]int {
		rows, err := tx.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		got := map[string]int{}
		for rows.Next() {
			var lambda, status string
			var n int
			if err := rows.Scan(&lambda, &status, &n); err != nil {
				t.Fatal(err)
			}
			got[lambda+" "+status] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	kept := read(`SELECT lambda, status, n FROM task_counts WHERE n != 0`)
	rows := read(`SELECT lambda, status, COUNT(*) FROM tasks GROUP BY lambda, status`)
	if !maps.Equal(kept, rows) {
		t.Errorf("the counts kept %v; the rows count %v", kept, rows)
	}
}

func TestConformance(t *testing.T) {
	var paths sync.Map // *Store: its file, for the app's own connection in TransactCreate
	storetest.Exercise(t, func(t *testing.T) task.Store {
		path := filepath.Join(t.TempDir(), "atf.db")
		s := open(t, path)
		t.Cleanup(func() { s.Close() })
		paths.Store(s, path)
		return s
	}, storetest.KeepsLogs(), storetest.Transact(func(t *testing.T, s task.Store, tk task.Task, commit bool) error {
		path, _ := paths.Load(s)
		return appTx(t, path.(string), tk, commit)
	}))
}

// appTx writes a row of the app's own and tk in one transaction of another connection to the
// store's file, as an app embedding the store would, and commits it or rolls it back.
func appTx(t *testing.T, path string, tk task.Task, commit bool) error {
	ctx := t.Context()
	app, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := app.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS app_orders (id TEXT)`); err != nil {
		t.Fatal(err)
	}
	tx, err := app.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO app_orders (id) VALUES (?)`, tk.ID); err != nil {
		t.Fatal(err)
	}
	if err := CreateTx(ctx, tx, tk); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

// TestDurable checks that what was written is there after the store is closed and reopened,
// as after a restart of `atf dev`.
func TestDurable(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	l := task.Lambda{Name: "durable"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC().Truncate(time.Microsecond)

	s := open(t, path)
	var want []task.Task
	for _, p := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`} {
		tk, err := task.New(task.Spec{Payload: []byte(p), Collection: "c"}, l, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		want = append(want, tk)
		now = now.Add(time.Millisecond)
	}
	enq, err := task.Apply(ctx, s, l.Name, want[1].ID, func(tk task.Task) (task.Task, error) { return task.Enqueue(tk, now, cfg) })
	if err != nil {
		t.Fatal(err)
	}
	want[1] = enq
	gate := task.Gate{Lambda: l.Name, Collection: "c", Mode: task.GatePause, UpdatedAt: now}
	if err := s.SetGate(ctx, gate); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	defer s.Close()
	got, next, err := s.List(ctx, task.ListParams{Lambda: l.Name})
	if err != nil || next != "" {
		t.Fatalf("List after reopening: %v, next %q", err, next)
	}
	if len(got) != len(want) {
		t.Fatalf("after reopening: got %d tasks, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Status != w.Status || g.Version != w.Version || string(g.Payload) != string(w.Payload) ||
			!g.CreatedAt.Equal(w.CreatedAt) || g.NextTriggerAt == nil || !g.NextTriggerAt.Equal(*w.NextTriggerAt) || g.Spec != w.Spec {
			t.Errorf("task %d after reopening: got %+v, want %+v", i, g, w)
		}
	}
	gates, err := s.Gates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gates) != 1 || gates[0].Lambda != gate.Lambda || gates[0].Collection != gate.Collection ||
		gates[0].Mode != gate.Mode || !gates[0].UpdatedAt.Equal(gate.UpdatedAt) {
		t.Errorf("gates after reopening: got %+v, want [%+v]", gates, gate)
	}
	// The reopened store still writes conditionally from where it left off.
	stale := want[1]
	stale.Version++
	if err := s.Update(ctx, stale, want[1].Version-1); !errors.Is(err, task.ErrConflict) {
		t.Errorf("Update from a version before the restart: got %v, want ErrConflict", err)
	}
}

// TestBadCursor checks cursors that decode as base64 but do not hold a position.
func TestBadCursor(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	for _, c := range []string{"bm90LWEtY3Vyc29y", encodeCursor(1, ""), "MTIz"} {
		if _, _, err := s.List(t.Context(), task.ListParams{Lambda: "l", Cursor: c}); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("cursor %q: got %v, want ErrInvalid", c, err)
		}
	}
	// A cursor the store made reads back.
	if _, _, err := s.List(t.Context(), task.ListParams{Lambda: "l", Cursor: encodeCursor(time.Now().UnixNano(), "id.1")}); err != nil {
		t.Errorf("own cursor: %v", err)
	}
}

// TestPragmas checks the settings durability rests on: they are per connection, so a typo in
// the DSN would silently fall back to SQLite's defaults.
func TestPragmas(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	for _, c := range []struct {
		db           *sql.DB
		pragma, want string
	}{
		{s.w, "journal_mode", "wal"},
		{s.w, "synchronous", "2"}, // FULL
		{s.w, "busy_timeout", "10000"},
		{s.r, "query_only", "1"},
		{s.r, "busy_timeout", "10000"},
	} {
		var got string
		if err := c.db.QueryRowContext(t.Context(), "PRAGMA "+c.pragma).Scan(&got); err != nil || got != c.want {
			t.Errorf("PRAGMA %s: got %q, %v; want %q", c.pragma, got, err, c.want)
		}
	}
}

// TestGroupCommit: writes that arrive together share commits, yet each keeps its own outcome:
// every update of a distinct task lands, of racing updates from one version exactly one wins, a
// batch with a taken id creates nothing while the batches beside it create all they hold,
// and all of it is there after a reopen. An update after Close fails.
func TestGroupCommit(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	l := task.Lambda{Name: "group"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var tasks []task.Task
	for i := range 101 {
		tk, err := task.New(task.Spec{ID: "t" + strconv.Itoa(i)}, l, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	if err := s.CreateBatch(ctx, tasks[:100]); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, tasks[100]); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 100)
	for i := range 100 {
		wg.Go(func() {
			next, err := task.Enqueue(tasks[i], now, cfg)
			if err == nil {
				err = s.Update(ctx, next, tasks[i].Version)
			}
			errs[i] = err
		})
	}
	var wins atomic.Int32
	racer := tasks[100]
	for i := range 20 {
		wg.Go(func() {
			next, err := task.Enqueue(racer, now.Add(time.Duration(i)), cfg)
			if err != nil {
				t.Error(err)
				return
			}
			switch err := s.Update(ctx, next, racer.Version); {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, task.ErrConflict):
				t.Errorf("racer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("update of %s: %v", tasks[i].ID, err)
		}
	}
	if wins.Load() != 1 {
		t.Errorf("%d racing updates from one version won, want 1", wins.Load())
	}
	// Batches created together: one with a taken id creates nothing, the others all they hold.
	batchErrs := make([]error, 10)
	for i := range 10 {
		wg.Go(func() {
			var batch []task.Task
			for j := range 5 {
				tk, err := task.New(task.Spec{ID: fmt.Sprintf("c%d-%d", i, j)}, l, now, cfg)
				if err != nil {
					t.Error(err)
					return
				}
				batch = append(batch, tk)
			}
			if i == 3 {
				batch[4].ID = "t0" // taken
			}
			batchErrs[i] = s.CreateBatch(ctx, batch)
		})
	}
	wg.Wait()
	for i, err := range batchErrs {
		if (i == 3) != errors.Is(err, task.ErrExists) || (i != 3 && err != nil) {
			t.Errorf("batch %d: %v", i, err)
		}
	}
	s.Close()
	if err := s.Update(ctx, tasks[0], tasks[0].Version); err == nil {
		t.Error("an update after Close succeeded")
	}

	s = open(t, path)
	defer s.Close()
	counts, err := s.Counts(ctx, l.Name)
	if err != nil {
		t.Fatal(err)
	}
	if counts[task.StatusEnqueued] != 101 || counts[task.StatusNew] != 45 {
		t.Errorf("after a reopen: %v, want all 101 enqueued and the 9 good batches' 45 tasks new", counts)
	}
}

// TestCountsKept: Counts reads the counts the writes keep, one row per status, instead of
// counting the lambda's rows; a file from before them gets its counts at open.
func TestCountsKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	ctx := t.Context()
	now := time.Now().UTC()
	for i := range 50 {
		tk := task.Task{ID: fmt.Sprint("t", i), Lambda: "l", Priority: "normal", Status: task.StatusSuccess, MaxAttempts: 1, CreatedAt: now, UpdatedAt: now, Version: 1}
		if i < 3 {
			tk.Status, tk.NextTriggerAt = task.StatusNew, &now
		}
		if err := s.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	var plan string
	rows, err := s.r.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT status, n FROM task_counts WHERE lambda = ? AND n > 0`, "l")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan += detail + "\n"
	}
	rows.Close()
	if !strings.Contains(plan, "task_counts") {
		t.Errorf("the counts query reads %q; want the task_counts table", plan)
	}
	want := map[task.Status]int{task.StatusNew: 3, task.StatusSuccess: 47}
	if got, err := s.Counts(ctx, "l"); err != nil || !maps.Equal(got, want) {
		t.Fatalf("Counts: %v, %v; want %v", got, err, want)
	}
	// A file written before the counts and the parked column: both come at the next open.
	for _, q := range []string{
		`DROP TRIGGER task_counts_insert`, `DROP TABLE task_counts`, `DROP INDEX tasks_parked`, `DROP INDEX tasks_due_lane`, `ALTER TABLE tasks DROP COLUMN parked`,
	} {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	if got, err := s.Counts(ctx, "l"); err != nil || !maps.Equal(got, want) {
		t.Errorf("Counts after the upgrade: %v, %v; want %v", got, err, want)
	}
}

// TestAddUpstreamsFrom: AddUpstreams writes nothing if from is not the stored number of
// upstreams, even from the right version: the upstreams a task has never change.
func TestAddUpstreamsFrom(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	l := task.Lambda{Name: "from"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	a, b, c := task.Ref{Lambda: "from", ID: "a"}, task.Ref{Lambda: "from", ID: "b"}, task.Ref{Lambda: "from", ID: "c"}
	down, err := task.New(task.Spec{After: []task.Ref{a, b}}, l, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, down); err != nil {
		t.Fatal(err)
	}
	added, err := task.AddUpstreams(down, []task.Ref{c}, now)
	if err != nil {
		t.Fatal(err)
	}
	// From 1, the write would put b at index 1 again and c at 2: nothing may change.
	if err := s.AddUpstreams(ctx, added, down.Version, 1); err == nil {
		t.Fatal("AddUpstreams from 1 of a task with 2 upstreams: no error")
	}
	got, err := s.Get(ctx, l.Name, down.ID)
	if err != nil || got.Version != down.Version || !slices.Equal(got.After, down.After) {
		t.Errorf("after a refused AddUpstreams: version %d, upstreams %v, %v; want %d, %v", got.Version, got.After, err, down.Version, down.After)
	}
	if err := s.AddUpstreams(ctx, added, down.Version, 2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, l.Name, down.ID); err != nil || !slices.Equal(got.After, []task.Ref{a, b, c}) {
		t.Errorf("after AddUpstreams from 2: upstreams %v, %v; want [a b c]", got.After, err)
	}
}
