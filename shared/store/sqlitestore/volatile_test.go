package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
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

// TestVolatileConformance: the view whose claims stay in memory is a task.Store like any.
func TestVolatileConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) task.Store {
		s := open(t, filepath.Join(t.TempDir(), "atf.db"))
		t.Cleanup(func() { s.Close() })
		return s.Volatile()
	}, storetest.KeepsLogs())
}

// enqueuedTask creates an enqueued task of lambda "v", synced, and returns it.
func enqueuedTask(t *testing.T, s *Store, id string, now time.Time, cfg task.Config) task.Task {
	t.Helper()
	tk, err := task.New(task.Spec{ID: id}, task.Lambda{Name: "v"}.WithDefaults(), now, cfg)
	if err == nil {
		tk, err = task.Enqueue(tk, now, cfg)
	}
	if err == nil {
		err = s.Create(t.Context(), tk)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// row reads the task's row, whatever memory holds.
func row(t *testing.T, s *Store, id string) task.Task {
	t.Helper()
	got, err := s.getStateRow(t.Context(), "v", id)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestVolatileClaimWritesNoRow: a claim and a heartbeat through the view leave the row as the
// create wrote it, while every read by key and the counts show the claim; the result writes the
// row once, from the create's version to the result's.
func TestVolatileClaimWritesNoRow(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	enq := enqueuedTask(t, s, "a", now, cfg)
	v := s.Volatile()

	claimed, err := task.Claim(enq, "lease", now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Update(ctx, claimed, enq.Version); err != nil {
		t.Fatal(err)
	}
	beat, err := task.Heartbeat(claimed, "lease", now.Add(time.Millisecond), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Update(ctx, beat, claimed.Version); err != nil {
		t.Fatal(err)
	}
	if r := row(t, s, "a"); r.Status != task.StatusEnqueued || r.Version != enq.Version {
		t.Errorf("the row after a claim and a heartbeat in memory: %s at version %d; want it as created, enqueued at %d", r.Status, r.Version, enq.Version)
	}
	for name, read := range map[string]func() (task.Task, error){
		"Get":      func() (task.Task, error) { return s.Get(ctx, "v", "a") },
		"GetState": func() (task.Task, error) { return v.GetState(ctx, "v", "a") },
		"GetMany": func() (task.Task, error) {
			many, err := s.GetMany(ctx, []task.Ref{{Lambda: "v", ID: "a"}})
			if err != nil {
				return task.Task{}, err
			}
			return many[0], nil
		},
	} {
		if got, err := read(); err != nil || got.Status != task.StatusProcessing || got.Version != beat.Version || got.Lease != "lease" {
			t.Errorf("%s: %s at version %d, lease %q, %v; want the heartbeat's: processing at %d", name, got.Status, got.Version, got.Lease, err, beat.Version)
		}
	}
	if got, err := s.Counts(ctx, "v"); err != nil || !maps.Equal(got, map[task.Status]int{task.StatusProcessing: 1}) {
		t.Errorf("Counts: %v, %v; want 1 processing", got, err)
	}
	if page, _, err := s.List(ctx, task.ListParams{Lambda: "v", Status: task.StatusEnqueued}); err != nil || len(page) != 0 {
		t.Errorf("List of enqueued tasks: %v, %v; want none: the row's status is not the task's", page, err)
	}

	// A write of the stale row's version conflicts: the task moved on, in memory.
	if _, err := task.Cancel(enq, now); err != nil {
		t.Fatal(err)
	}
	stale, _ := task.Cancel(enq, now)
	if err := s.Update(ctx, stale, enq.Version); !errors.Is(err, task.ErrConflict) {
		t.Errorf("a cancel of the row's version, under a claim in memory: %v; want ErrConflict", err)
	}

	done, err := task.Succeed(beat, "lease", nil, now.Add(2*time.Millisecond), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Update(ctx, done, beat.Version); err != nil {
		t.Fatal(err)
	}
	if r := row(t, s, "a"); r.Status != task.StatusSuccess || r.Version != done.Version || r.Attempts != 1 {
		t.Errorf("the row after the result: %s at version %d, %d attempts; want success at %d, 1 attempt", r.Status, r.Version, r.Attempts, done.Version)
	}
	if got, err := s.Counts(ctx, "v"); err != nil || !maps.Equal(got, map[task.Status]int{task.StatusSuccess: 1}) {
		t.Errorf("Counts after the result: %v, %v; want 1 success", got, err)
	}
	if h, err := s.Attempts(ctx, "v", "a"); err != nil || len(h.Attempts) != 1 {
		t.Errorf("the history after the result: %+v, %v; want the attempt", h, err)
	}
}

// TestVolatileOtherViewsWrite: a claim kept in memory is written by any write through another
// view (the API's cancel, synced), and a claim through the Store itself is written at once.
func TestVolatileOtherViewsWrite(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	enq := enqueuedTask(t, s, "a", now, cfg)
	claimed, _ := task.Claim(enq, "lease", now, cfg)
	if err := s.Volatile().Update(ctx, claimed, enq.Version); err != nil {
		t.Fatal(err)
	}
	cancelled, err := task.Cancel(claimed, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, cancelled, claimed.Version); err != nil {
		t.Fatal(err)
	}
	if r := row(t, s, "a"); r.Status != task.StatusProcessing || !r.CancelRequested || r.Version != cancelled.Version || r.Lease != "lease" {
		t.Errorf("the row after a cancel of a claim in memory: %s, cancel requested %v, version %d, lease %q; want the cancel's state", r.Status, r.CancelRequested, r.Version, r.Lease)
	}

	other := enqueuedTask(t, s, "b", now, cfg)
	byStore, _ := task.Claim(other, "lease", now, cfg)
	if err := s.Update(ctx, byStore, other.Version); err != nil {
		t.Fatal(err)
	}
	if r := row(t, s, "b"); r.Status != task.StatusProcessing {
		t.Errorf("the row of a claim through the Store: %s; want processing", r.Status)
	}
}

// TestVolatileFlush: a claim whose run outlasts half its lease is written to its row, where the
// sweep's Due of running tasks finds it once the lease ends.
func TestVolatileFlush(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	enq := enqueuedTask(t, s, "a", now, cfg)
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	claimed, _ := task.Claim(enq, "lease", now, cfg)
	if err := s.Volatile().Update(ctx, claimed, enq.Version); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for row(t, s, "a").Status != task.StatusProcessing {
		if time.Now().After(deadline) {
			t.Fatal("the claim was not written to its row in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := row(t, s, "a"); r.Version != claimed.Version || r.Lease != "lease" {
		t.Errorf("the row flushed: version %d, lease %q; want the claim's, %d", r.Version, r.Lease, claimed.Version)
	}
	due, err := s.Due(ctx, task.DueParams{Lambda: "v", Statuses: task.Running, Before: *claimed.NextTriggerAt})
	if err != nil || len(due) != 1 {
		t.Errorf("Due of running tasks at the lease's end: %v, %v; want the claim", due, err)
	}
	done, _ := task.Succeed(claimed, "lease", nil, now, cfg)
	if err := s.Volatile().Update(ctx, done, claimed.Version); err != nil || row(t, s, "a").Status != task.StatusSuccess {
		t.Errorf("the result after the flush: %v; want it written", err)
	}
}

// TestVolatileUnjournaledClaimFails: a claim that cannot be journaled is not made, and says so.
func TestVolatileUnjournaledClaimFails(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	defer s.Close()
	if err := os.Mkdir(path+"-claims", 0o755); err != nil { // no file can be opened there
		t.Fatal(err)
	}
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	enq := enqueuedTask(t, s, "a", now, cfg)
	claimed, _ := task.Claim(enq, "lease", now, cfg)
	if err := s.Volatile().Update(ctx, claimed, enq.Version); err == nil {
		t.Fatal("a claim with no journal succeeded")
	}
	if got, err := s.Get(ctx, "v", "a"); err != nil || got.Status != task.StatusEnqueued || got.Version != enq.Version {
		t.Errorf("the task after the failed claim: %s at %d, %v; want it enqueued at %d", got.Status, got.Version, err, enq.Version)
	}
}

// claimChildEnv makes the test binary the child of TestVolatileClaimSurvivesKill.
const claimChildEnv = "ATF_SQLITESTORE_CLAIM_CHILD"

// TestVolatileClaimSurvivesKill: a claim kept in memory and acknowledged before a kill -9 of the
// process counts its attempt after it: the next Open writes it from the journal, processing,
// its lease over, for the consumer's recovery to time out. A child claims the tasks of a synced
// batch one by one through the view, printing each id once its claim returned; the test kills
// it mid-stream and reopens the file.
func TestVolatileClaimSurvivesKill(t *testing.T) {
	if path := os.Getenv(claimChildEnv); path != "" {
		claimChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "atf.db")
	claimed := map[string]bool{}
	killChild(t, "TestVolatileClaimSurvivesKill", claimChildEnv, path, func(line string) bool {
		if id, ok := strings.CutPrefix(line, "claimed "); ok {
			claimed[id] = true
		}
		return len(claimed) >= 50
	})

	s := open(t, path)
	defer s.Close()
	now := time.Now()
	for i := range claimChildTasks {
		id := "t" + strconv.Itoa(i)
		got, err := s.Get(t.Context(), "v", id)
		switch {
		case err != nil:
			t.Errorf("task %s: %v", id, err)
		case claimed[id] && (got.Status != task.StatusProcessing || got.Attempts != 1 || got.NextTriggerAt == nil || got.NextTriggerAt.After(now)):
			t.Errorf("task %s, claimed before the kill: %s, %d attempts, lease until %v; want processing, 1 attempt, its lease over", id, got.Status, got.Attempts, got.NextTriggerAt)
		case !claimed[id] && got.Status != task.StatusEnqueued && got.Status != task.StatusProcessing:
			t.Errorf("task %s: %s; want enqueued, or processing (claimed as the child was killed)", id, got.Status)
		}
	}
	if _, err := os.Stat(path + "-claims"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the journal after the claims were written: %v; want it gone", err)
	}
	// Opened again, nothing is counted twice.
	s.Close()
	s = open(t, path)
	if got, err := s.Get(t.Context(), "v", "t0"); err != nil || got.Attempts != 1 {
		t.Errorf("t0 after a second Open: %d attempts, %v; want 1", got.Attempts, err)
	}
}

const claimChildTasks = 1000

// claimChild creates claimChildTasks enqueued tasks, synced, then claims them one by one through
// the Volatile view, printing each claim once it returned, until it is killed.
func claimChild(path string) {
	s, err := Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	batch := make([]task.Task, claimChildTasks)
	for i := range batch {
		tk, err := task.New(task.Spec{ID: "t" + strconv.Itoa(i)}, task.Lambda{Name: "v"}.WithDefaults(), now, cfg)
		if err == nil {
			tk, err = task.Enqueue(tk, now, cfg)
		}
		if err != nil {
			panic(err)
		}
		batch[i] = tk
	}
	for chunk := range slices.Chunk(batch, 100) {
		if err := s.CreateBatch(ctx, chunk); err != nil {
			panic(err)
		}
	}
	for _, tk := range batch {
		claimed, err := task.Claim(tk, task.NewLease(), time.Now().UTC(), cfg)
		if err == nil {
			err = s.Volatile().Update(ctx, claimed, tk.Version)
		}
		if err != nil {
			panic(err)
		}
		fmt.Println("claimed", tk.ID)
	}
	time.Sleep(time.Hour) // killed before
}

// TestVolatileAddUpstreamsRefusedWhileKept: AddUpstreams writes the row in a transaction of its
// own. Racing a claim kept in memory (the API read the task enqueued just before the executor
// claimed it), it must be refused, as it would be by the claim's write: the task runs already.
// Accepted, the entry and the row would both be at the next version, in different states, and
// the entry's flush would conflict. (Found by review.)
func TestVolatileAddUpstreamsRefusedWhileKept(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	up := enqueuedTask(t, s, "up", now, cfg)
	enq := enqueuedTask(t, s, "down", now, cfg)

	read, err := s.Get(ctx, "v", "down") // the API's read (frontend.AddUpstreams), enqueued
	if err != nil {
		t.Fatal(err)
	}
	claimed, _ := task.Claim(enq, "lease", now, cfg) // the executor claims meanwhile
	if err := s.Volatile().Update(ctx, claimed, enq.Version); err != nil {
		t.Fatal(err)
	}
	next, err := task.AddUpstreams(read, []task.Ref{up.Ref()}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddUpstreams(ctx, next, read.Version, read.AfterCount); err == nil {
		t.Errorf("AddUpstreams over a claim kept in memory was accepted: the task runs before the upstreams it now waits for")
	}

	time.Sleep(FlushAfter + 300*time.Millisecond) // the entry is due for its flush, and written
	if r := row(t, s, "down"); r.Status != task.StatusProcessing || r.Version != claimed.Version {
		t.Errorf("the row after the flush: %s at %d; want the claim's, processing at %d", r.Status, r.Version, claimed.Version)
	}
	other, _ := task.New(task.Spec{ID: "other"}, task.Lambda{Name: "v"}.WithDefaults(), time.Now().UTC(), cfg)
	if err := s.Create(ctx, other); err != nil {
		t.Errorf("an unrelated create after the flush came due: %v", err)
	}
	done, _ := task.Succeed(claimed, "lease", nil, time.Now().UTC(), cfg)
	if err := s.Volatile().Update(ctx, done, claimed.Version); err != nil {
		t.Errorf("the run's result: %v", err)
	}
}

// TestVolatileKeepsHeartbeatsOnly: the consumer's flow check marks a running upstream
// (task.MarkDownstream) through the Volatile view; the mark keeps the status processing, but it
// is no heartbeat: it must be written, since a crash that lost it would leave the upstream to end
// without telling its downstream, pending forever. (Found by review.)
func TestVolatileKeepsHeartbeatsOnly(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	enq := enqueuedTask(t, s, "up", now, cfg)
	v := s.Volatile()
	claimed, _ := task.Claim(enq, "lease", now, cfg)
	if err := v.Update(ctx, claimed, enq.Version); err != nil {
		t.Fatal(err)
	}
	read, _ := v.GetState(ctx, "v", "up") // consumer markUpstreams: task.ApplyState on its store
	marked, err := task.MarkDownstream(read, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Update(ctx, marked, read.Version); err != nil {
		t.Fatal(err)
	}
	if r := row(t, s, "up"); !r.Downstream {
		t.Errorf("an acknowledged MarkDownstream is not on the row (kept in memory only)")
	}
	s.Close() // as a kill -9: the entries are gone, the journal stays
	s = open(t, path)
	defer s.Close()
	got, _ := s.Get(ctx, "v", "up")
	if !got.Downstream {
		t.Errorf("after a restart the upstream has lost its Downstream mark (%s, attempts %d): its end will tell no downstream", got.Status, got.Attempts)
	}
}

// TestVolatileJournalNamesItsTask: a finished task pruned and scheduled again under the same id
// comes back to the same version; a crash must not count a journaled claim of the old task on
// the new one, which never ran. (Found by review.)
func TestVolatileJournalNamesItsTask(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	v := s.Volatile()
	// A claim that stays in memory throughout keeps the journal's lines.
	keep := enqueuedTask(t, s, "keep", now, cfg)
	kept, _ := task.Claim(keep, "lease", now, cfg)
	if err := v.Update(ctx, kept, keep.Version); err != nil {
		t.Fatal(err)
	}
	old := enqueuedTask(t, s, "x", now, cfg)
	claimed, _ := task.Claim(old, "lease", now, cfg)
	if err := v.Update(ctx, claimed, old.Version); err != nil {
		t.Fatal(err)
	}
	done, _ := task.Succeed(claimed, "lease", nil, now, cfg)
	if err := v.Update(ctx, done, claimed.Version); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, time.Now().Add(time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	again := enqueuedTask(t, s, "x", time.Now().UTC(), cfg) // scheduled again, same id
	if again.Version != old.Version {
		t.Fatalf("versions differ: %d, %d", again.Version, old.Version)
	}
	s.Close() // as a crash
	s = open(t, path)
	defer s.Close()
	got, _ := s.Get(ctx, "v", "x")
	if got.Status != task.StatusEnqueued || got.Attempts != 0 {
		t.Errorf("the new task x, never claimed, after a restart: %s with %d attempts; want enqueued, 0", got.Status, got.Attempts)
	}
	if got, _ := s.Get(ctx, "v", "keep"); got.Status != task.StatusProcessing || got.Attempts != 1 {
		t.Errorf("the claim kept in memory, after a restart: %s with %d attempts; want processing, 1", got.Status, got.Attempts)
	}
}

// TestVolatileJournalGarbageTail: a power loss may leave an unsynced append's tail as zeros;
// Open must start all the same, reading the whole lines it finds. (Found by review.)
func TestVolatileJournalGarbageTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	s.Close()
	if err := os.WriteFile(path+"-claims", make([]byte, 70<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Errorf("Open after a journal with a zeroed tail: %v", err)
		return
	}
	s.Close()
}

// TestVolatileCountsUnderLoad: tasks created new, enqueued, claimed, heartbeaten and ended
// through the view by many goroutines at once, some runs outliving their flush, leave the counts
// as their rows are (open's cleanup checks it) and as Counts reports them.
func TestVolatileCountsUnderLoad(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	const n = 400
	var batch []task.Task
	for i := range n {
		tk, err := task.New(task.Spec{ID: "t" + strconv.Itoa(i)}, task.Lambda{Name: "v"}.WithDefaults(), now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, tk)
	}
	for chunk := range slices.Chunk(batch, 100) {
		if err := s.CreateBatch(ctx, chunk); err != nil {
			t.Fatal(err)
		}
	}
	v := s.Volatile()
	short := cfg
	short.HeartbeatTimeout = 300 * time.Millisecond // half of it: the claim is flushed mid-run
	var wg sync.WaitGroup
	for i, tk := range batch {
		wg.Go(func() {
			step := func(next task.Task, err error, prev int64) task.Task {
				if err == nil {
					err = v.Update(ctx, next, prev)
				}
				if err != nil {
					t.Errorf("%s to %s: %v", tk.ID, next.Status, err)
				}
				return next
			}
			at := time.Now().UTC()
			enq, err := task.Enqueue(tk, at, cfg)
			enq = step(enq, err, tk.Version)
			c := cfg
			if i%4 == 0 {
				c = short
			}
			claimed, err := task.Claim(enq, "lease", at, c)
			claimed = step(claimed, err, enq.Version)
			if i%4 == 0 {
				time.Sleep(200 * time.Millisecond)
			}
			beat, err := task.Heartbeat(claimed, "lease", time.Now().UTC(), c)
			beat = step(beat, err, claimed.Version)
			var done task.Task
			if i%3 == 0 {
				done, err = task.Fail(beat, "lease", "no", true, time.Now().UTC(), c, 0.5)
			} else {
				done, err = task.Succeed(beat, "lease", nil, time.Now().UTC(), c)
			}
			step(done, err, beat.Version)
		})
	}
	wg.Wait()
	got, err := s.Counts(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[task.Status]int{}
	for i := range n {
		rows[row(t, s, "t"+strconv.Itoa(i)).Status]++
	}
	if !maps.Equal(got, rows) {
		t.Errorf("Counts %v; the rows say %v", got, rows)
	}
}

// copyFiles copies the database, its WAL and its journal as a crash would leave them (the
// writer idle): the copy is opened as the next process would.
func copyFiles(t *testing.T, from, to string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-claims"} {
		b, err := os.ReadFile(from + suffix)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+suffix, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVolatileRekeptClaimJournaled: a claim kept in the group that wrote and dropped the task's
// earlier entry (a release, an enqueue and a claim in one UpdateMany) is journaled: its row's
// version is new. (Found by review.)
func TestVolatileRekeptClaimJournaled(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "atf.db")
	s := open(t, path)
	defer s.Close()
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	enq := enqueuedTask(t, s, "a", now, cfg)
	v := s.Volatile()
	c1, _ := task.Claim(enq, "l1", now, cfg)
	if err := v.Update(ctx, c1, enq.Version); err != nil {
		t.Fatal(err)
	}
	rel, err := task.Release(c1, "l1", now)
	if err != nil {
		t.Fatal(err)
	}
	enq2, err := task.Enqueue(rel, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := task.Claim(enq2, "l2", now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range v.UpdateMany(ctx, []task.Versioned{{Task: rel, Prev: c1.Version}, {Task: enq2, Prev: rel.Version}, {Task: c2, Prev: enq2.Version}}) {
		if err != nil {
			t.Fatal(i, err)
		}
	}
	if r := row(t, s, "a"); r.Status != task.StatusEnqueued || r.Version != enq2.Version {
		t.Fatalf("row %s at %d; want the claim kept over enqueued %d", r.Status, r.Version, enq2.Version)
	}
	data, _ := os.ReadFile(path + "-claims")
	found := false
	for _, l := range parseJournal(data) {
		if l.id == "a" && l.version == enq2.Version {
			found = true
		}
	}
	if !found {
		t.Errorf("the journal %q has no line for the acknowledged claim over version %d", data, enq2.Version)
	}
	// The next process after a crash now.
	crashed := filepath.Join(t.TempDir(), "atf.db")
	copyFiles(t, path, crashed)
	s2 := open(t, crashed)
	defer s2.Close()
	if r := row(t, s2, "a"); r.Status != task.StatusProcessing || r.Attempts != 1 {
		t.Errorf("after a crash: %s, %d attempts; want the acknowledged claim recovered, processing, 1 attempt", r.Status, r.Attempts)
	}
}

// TestVolatileCountsNeverDouble: Counts never counts one task twice (its row moved by a commit,
// its entry not yet dropped): polled while tasks are claimed in memory and ended, the counts add
// up to no more tasks than exist. A race, so a defect shows often, not always. (Found by review.)
func TestVolatileCountsNeverDouble(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	v := s.Volatile()
	var created atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int64
	var worst atomic.Value
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := s.Counts(context.Background(), "v")
				if err != nil {
					return
				}
				after := created.Load()
				sum := 0
				for _, n := range c {
					sum += n
				}
				if int64(sum) > after {
					bad.Add(1)
					worst.Store(c)
				}
			}
		})
	}
	for i := range 1500 {
		id := "t" + string(rune('a'+i%26)) + time.Now().Format("150405.000000000")
		created.Add(1)
		enq := enqueuedTask(t, s, id, now, cfg)
		cl, _ := task.Claim(enq, "l", now, cfg)
		if err := v.Update(ctx, cl, enq.Version); err != nil {
			t.Fatal(err)
		}
		done, _ := task.Succeed(cl, "l", nil, now, cfg)
		if err := v.Update(ctx, done, cl.Version); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if bad.Load() > 0 {
		t.Errorf("%d reads of Counts counted more tasks than exist, e.g. %v", bad.Load(), worst.Load())
	}
}

// TestVolatileGetManyMonotonic: GetMany never shows a task at a version older than one it has
// shown (a row read before the commit that dropped its entry). A race, as above. (Found by
// review.)
func TestVolatileGetManyMonotonic(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	cfg, now := task.Config{}.WithDefaults(), time.Now().UTC()
	v := s.Volatile()
	var regressions atomic.Int64
	for i := range 300 {
		id := "g" + time.Now().Format("150405.000000000") + string(rune('a'+i%26))
		enq := enqueuedTask(t, s, id, now, cfg)
		cl, _ := task.Claim(enq, "l", now, cfg)
		if err := v.Update(ctx, cl, enq.Version); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			var seen int64
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, err := s.GetMany(context.Background(), []task.Ref{{Lambda: "v", ID: id}})
				if err != nil || len(m) == 0 {
					return
				}
				if m[0].Version < seen {
					if regressions.Add(1) < 5 {
						t.Logf("seen %d, then %s at %d", seen, m[0].Status, m[0].Version)
					}
				}
				seen = max(seen, m[0].Version)
			}
		})
		time.Sleep(200 * time.Microsecond)
		done, _ := task.Succeed(cl, "l", nil, now, cfg)
		if err := v.Update(ctx, done, cl.Version); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Microsecond)
		close(stop)
		wg.Wait()
	}
	if regressions.Load() > 0 {
		t.Errorf("GetMany went back to an older version %d times", regressions.Load())
	}
}
