package sqlitestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	cmd := exec.Command(os.Args[0], "-test.run=^TestVolatileClaimSurvivesKill$")
	cmd.Env = append(os.Environ(), claimChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	claimed := map[string]bool{}
	lines := bufio.NewScanner(out)
	for lines.Scan() && len(claimed) < 50 {
		if id, ok := strings.CutPrefix(lines.Text(), "claimed "); ok {
			claimed[id] = true
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(claimed) < 50 {
		t.Fatalf("the child stopped after %d claims: %v", len(claimed), lines.Err())
	}

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
