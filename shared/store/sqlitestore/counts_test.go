package sqlitestore

import (
	"database/sql"
	"encoding/json"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// wantCounts checks the counts of one lambda.
func wantCounts(t *testing.T, s *Store, lambda string, want map[task.Status]int) {
	t.Helper()
	if got, err := s.Counts(t.Context(), lambda); err != nil || !maps.Equal(got, want) {
		t.Errorf("counts of %s: %v, %v; want %v", lambda, got, err, want)
	}
}

// newTask is a task of lambda made by task.New, due now.
func newTask(t *testing.T, lambda, id string, now time.Time) task.Task {
	t.Helper()
	tk, err := task.New(task.Spec{ID: id}, task.Lambda{Name: lambda}.WithDefaults(), now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestCountsOfEveryWrite: the writes outside the group writer's Update count too: FireSchedule
// its tasks created (not those whose id was taken), AddUpstreams a task made pending, Redrive a
// dead task made new, and Prune the tasks it deletes. (The cleanup's checkCounts then compares
// every count with the rows.)
func TestCountsOfEveryWrite(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	now := time.Now().UTC()
	cfg := task.Config{}.WithDefaults()

	// FireSchedule: three firings, one of whose ids a client took first.
	sc := task.Schedule{ID: "nightly", Lambda: "fire", Rate: "1m", State: task.ScheduleActive, NextFire: now,
		CreatedAt: now, UpdatedAt: now, Version: 1, Spec: "spec"}
	if err := s.CreateSchedule(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, newTask(t, "fire", "f1", now)); err != nil {
		t.Fatal(err)
	}
	fired := sc
	fired.Version, fired.NextFire = 2, now.Add(time.Minute)
	created, err := s.FireSchedule(ctx, fired, sc.Version, []task.Task{newTask(t, "fire", "f0", now), newTask(t, "fire", "f1", now), newTask(t, "fire", "f2", now)})
	if err != nil || created[1] || !created[0] || !created[2] {
		t.Fatalf("FireSchedule: %v, %v; want f0 and f2 created", created, err)
	}
	wantCounts(t, s, "fire", map[task.Status]int{task.StatusNew: 3})

	// AddUpstreams: a new task waits for another, pending.
	up, down := newTask(t, "flow", "up", now), newTask(t, "flow", "down", now)
	if err := s.CreateBatch(ctx, []task.Task{up, down}); err != nil {
		t.Fatal(err)
	}
	added, err := task.AddUpstreams(down, []task.Ref{up.Ref()}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddUpstreams(ctx, added, down.Version, 0); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "flow", map[task.Status]int{task.StatusNew: 1, task.StatusPending: 1})

	// Redrive: a dead task lives again, new.
	dead := newTask(t, "redrive", "d", now)
	dead.Status, dead.NextTriggerAt = task.StatusDead, nil
	if err := s.Create(ctx, dead); err != nil {
		t.Fatal(err)
	}
	again, err := task.Redrive(dead, task.RedriveOptions{Payload: json.RawMessage(`{"again":true}`)}, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Redrive(ctx, again, dead.Version); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "redrive", map[task.Status]int{task.StatusNew: 1})

	// Prune: the old ended tasks go, the recent one and the waiting one stay.
	old := now.Add(-48 * time.Hour)
	var ended []task.Task
	for i, st := range []task.Status{task.StatusSuccess, task.StatusSuccess, task.StatusDead} {
		tk := newTask(t, "prune", "old"+string(rune('a'+i)), old)
		tk.Status, tk.NextTriggerAt = st, nil
		ended = append(ended, tk)
	}
	recent := newTask(t, "prune", "recent", now)
	recent.Status, recent.NextTriggerAt = task.StatusSuccess, nil
	if err := s.CreateBatch(ctx, append(ended, recent, newTask(t, "prune", "waiting", old))); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, now.Add(-24*time.Hour), 100); err != nil || n != 3 {
		t.Fatalf("Prune: %d, %v; want 3", n, err)
	}
	wantCounts(t, s, "prune", map[task.Status]int{task.StatusSuccess: 1, task.StatusNew: 1})
}

// TestCountsInOneGroup: two updates of one task in one commit (the second over the first's
// version) count as the moves they make, the second from the status the first wrote.
func TestCountsInOneGroup(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	now := time.Now().UTC()
	cfg := task.Config{}.WithDefaults()
	tk := newTask(t, "group", "g", now)
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	enqueued, err := task.Enqueue(tk, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := task.Claim(enqueued, task.NewLease(), now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range s.UpdateMany(ctx, []task.Versioned{{Task: enqueued, Prev: tk.Version}, {Task: claimed, Prev: enqueued.Version}}) {
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	wantCounts(t, s, "group", map[task.Status]int{task.StatusProcessing: 1})
}

// TestCountsGuardedAgainstOtherWrites: the writer remembers the status it wrote a task with, but
// counts a move from the status the update replaced: a write it did not make (here, an app's
// own SQL, counting its move) that changed the status at the same version is not counted over.
func TestCountsGuardedAgainstOtherWrites(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	now := time.Now().UTC()
	tk := newTask(t, "guard", "g", now)
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE tasks SET status = 'pending' WHERE lambda = 'guard' AND id = 'g'`,
		`UPDATE task_counts SET n = n - 1 WHERE lambda = 'guard' AND status = 'new'`,
		`INSERT INTO task_counts (lambda, status, n) VALUES ('guard', 'pending', 1)`,
	} {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	enqueued, err := task.Enqueue(tk, now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, enqueued, tk.Version); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "guard", map[task.Status]int{task.StatusEnqueued: 1})
}

// TestCountFailureRollsBack: a commit whose count write fails writes none of its rows either:
// counts and rows are one transaction. A trigger that refuses every write of task_counts makes
// the count write fail.
func TestCountFailureRollsBack(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	now := time.Now().UTC()
	cfg := task.Config{}.WithDefaults()
	tk := newTask(t, "refused", "r", now)
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	refuse := func(on bool) {
		t.Helper()
		qs := []string{`DROP TRIGGER refuse_count_insert`, `DROP TRIGGER refuse_count_update`}
		if on {
			qs = []string{
				`CREATE TRIGGER refuse_count_insert BEFORE INSERT ON task_counts BEGIN SELECT RAISE(ABORT, 'counts refused'); END`,
				`CREATE TRIGGER refuse_count_update BEFORE UPDATE ON task_counts BEGIN SELECT RAISE(ABORT, 'counts refused'); END`,
			}
		}
		for _, q := range qs {
			if _, err := s.w.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	refuse(true)
	enqueued, err := task.Enqueue(tk, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := newTask(t, "refused", "other", now)
	if err := s.Update(ctx, enqueued, tk.Version); err == nil || !strings.Contains(err.Error(), "counts refused") {
		t.Errorf("an update whose count write fails: %v; want the count's error", err)
	}
	if err := s.Create(ctx, other); err == nil || !strings.Contains(err.Error(), "counts refused") {
		t.Errorf("a create whose count write fails: %v; want the count's error", err)
	}
	refuse(false)
	if got, err := s.Get(ctx, "refused", tk.ID); err != nil || got.Status != task.StatusNew || got.Version != tk.Version {
		t.Errorf("the task after the failed update: %s at version %d, %v; want new at %d", got.Status, got.Version, err, tk.Version)
	}
	if _, err := s.Get(ctx, "refused", other.ID); err == nil {
		t.Error("the task of the failed create exists")
	}
	wantCounts(t, s, "refused", map[task.Status]int{task.StatusNew: 1})
	// The update goes through once the counts can be written, from the status it replaces.
	if err := s.Update(ctx, enqueued, tk.Version); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, "refused", map[task.Status]int{task.StatusEnqueued: 1})
}

// legacyCountTriggersSQL makes the triggers with which atf before counts per commit kept the
// counts, as its schema made them on every open.
const legacyCountTriggersSQL = `
CREATE TRIGGER IF NOT EXISTS task_counts_insert AFTER INSERT ON tasks BEGIN
	INSERT INTO task_counts (lambda, status, n) VALUES (new.lambda, new.status, 1)
		ON CONFLICT (lambda, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS task_counts_update AFTER UPDATE OF status ON tasks WHEN old.status != new.status BEGIN
	UPDATE task_counts SET n = n - 1 WHERE lambda = old.lambda AND status = old.status;
	INSERT INTO task_counts (lambda, status, n) VALUES (new.lambda, new.status, 1)
		ON CONFLICT (lambda, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS task_counts_delete AFTER DELETE ON tasks BEGIN
	UPDATE task_counts SET n = n - 1 WHERE lambda = old.lambda AND status = old.status;
END;`

// TestOlderVersionOpenedTheFile: an older atf that opened the file in between made its count
// triggers of moves and deletes again and wrote through them. The next open drops them (the
// insert's stays: it is this version's too) and counts the rows afresh (here the counts were also
// off, as a bug of the older version could leave them), and the writes after it count once, not
// once in Go and once more by a trigger.
func TestOlderVersionOpenedTheFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	now := time.Now().UTC()
	cfg := task.Config{}.WithDefaults()
	a, b := newTask(t, "mixed", "a", now), newTask(t, "mixed", "b", now)
	if err := s.CreateBatch(ctx, []task.Task{a, b}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// The older version: its schema's triggers, a write through them, and a count gone wrong.
	older, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		legacyCountTriggersSQL,
		`UPDATE tasks SET status = 'enqueued', version = version + 1 WHERE lambda = 'mixed' AND id = 'b'`,
		`UPDATE task_counts SET n = 7 WHERE lambda = 'mixed' AND status = 'new'`,
	} {
		if _, err := older.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	older.Close()

	s = open(t, path)
	defer s.Close()
	var triggers string
	if err := s.r.QueryRowContext(ctx, `SELECT group_concat(name) FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'task_counts_%'`).Scan(&triggers); err != nil || triggers != "task_counts_insert" {
		t.Errorf("count triggers after the open: %q, %v; want task_counts_insert alone", triggers, err)
	}
	wantCounts(t, s, "mixed", map[task.Status]int{task.StatusNew: 1, task.StatusEnqueued: 1})

	// Writes after the open: a create, and a's enqueue, claim and success.
	if err := s.Create(ctx, newTask(t, "mixed", "c", now)); err != nil {
		t.Fatal(err)
	}
	lease := task.NewLease()
	prev := a
	for _, next := range []func(task.Task) (task.Task, error){
		func(t task.Task) (task.Task, error) { return task.Enqueue(t, now, cfg) },
		func(t task.Task) (task.Task, error) { return task.Claim(t, lease, now, cfg) },
		func(t task.Task) (task.Task, error) { return task.Succeed(t, lease, nil, now, cfg) },
	} {
		n, err := next(prev)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Unsynced().Update(ctx, n, prev.Version); err != nil {
			t.Fatal(err)
		}
		prev = n
	}
	wantCounts(t, s, "mixed", map[task.Status]int{task.StatusNew: 1, task.StatusEnqueued: 1, task.StatusSuccess: 1})
}

// TestStatusMemo: the memo answers for a task's last write at its version only, keeps a
// transaction's notes only once it commits, forgets ended tasks that have nothing left to do, and
// holds at most two generations of maxRemembered tasks, the latest written.
func TestStatusMemo(t *testing.T) {
	m := newStatusMemo()
	at := func(id string, version int64, s task.Status) task.Task {
		return task.Task{Lambda: "memo", ID: id, Version: version, Status: s}
	}
	ref := func(id string) task.Ref { return task.Ref{Lambda: "memo", ID: id} }
	m.note(at("a", 1, task.StatusNew))
	if s, ok := m.status(ref("a"), 1); !ok || s != task.StatusNew {
		t.Errorf("a noted in the transaction under way: %q, %v; want new", s, ok)
	}
	m.abort()
	if _, ok := m.status(ref("a"), 1); ok {
		t.Error("a noted by a transaction rolled back: still remembered")
	}
	m.note(at("a", 1, task.StatusNew))
	m.commit()
	if _, ok := m.status(ref("a"), 2); ok {
		t.Error("a at another version than written: remembered")
	}
	telling := at("b", 2, task.StatusSuccess)
	telling.NextTriggerAt = &time.Time{}
	m.note(at("a", 2, task.StatusSuccess))
	m.note(telling)
	m.commit()
	if _, ok := m.status(ref("a"), 2); ok {
		t.Error("a, ended: remembered")
	}
	if s, ok := m.status(ref("b"), 2); !ok || s != task.StatusSuccess {
		t.Errorf("b, ended with downstreams to tell: %q, %v; want success", s, ok)
	}
	for i := range 2*maxRemembered + 10 {
		m.note(at(strconv.Itoa(i), 1, task.StatusEnqueued))
		if i%1000 == 0 {
			m.commit()
		}
	}
	m.commit()
	if n := len(m.newer) + len(m.older); n > 2*maxRemembered {
		t.Errorf("%d tasks remembered, want at most %d", n, 2*maxRemembered)
	}
	if s, ok := m.status(ref(strconv.Itoa(2*maxRemembered+9)), 1); !ok || s != task.StatusEnqueued {
		t.Errorf("the latest task written: %q, %v; want enqueued", s, ok)
	}
	if _, ok := m.status(ref("0"), 1); ok {
		t.Error("the first task written, two generations back: still remembered")
	}
}
