package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Claims kept in memory (the Volatile view). A task's happy path on the embedded store writes
// its row twice: the create, and the end. The claim in between, and the heartbeats of a short
// run, live in memory, in the writer's order: the writer checks a claim against the row (its
// version, and that it is enqueued) inside its transaction, as it would write it, and keeps the
// claimed task as an entry instead. Every later write of the task, through any view, goes
// through the entry: a heartbeat replaces it, and any other transition (a result, a release, a
// cancel) writes the row over the row's own version and drops it. A claim still running after
// FlushAfter (or half its lease, if that is sooner) is written to its row, so that a lease the
// store times is in the store, where the consumer's sweep finds it.
//
// Reads by key (Get, GetState, GetMany, GetBatch) and Counts see the entries. The sweep's Due
// reads the rows, where a claim younger than FlushAfter is still enqueued; lists read the rows
// and show the entries over them.
//
// A crash of the process loses the entries, and leaves their rows enqueued, to run again: what
// the claims' runners ran died with the process (the in-process executors, and the programs
// they start, which the kernel kills with it). So that the attempt still counts (a handler that
// kills the process must not run forever), each claim is appended to a journal beside the
// database (<path>-claims) before it is answered, unsynced, as the unsynced writes are. The next
// Open writes each journaled claim whose row has not moved since as it would have been written,
// its lease already over, for the consumer's recovery to time out. A power loss may lose the
// journal's tail too: those claims then run again without counting, as an unsynced claim lost
// to a power loss did (docs/guarantees.md, "The embedded store").

// FlushAfter is how long a claim stays in memory only, at most: a run longer than this has its
// claim written to its row.
const FlushAfter = time.Second

// journalRewriteBytes is the size past which the journal is rewritten with the live entries only.
const journalRewriteBytes = 1 << 20

// volatileEntry is a claimed task kept in memory, and what its row holds.
type volatileEntry struct {
	t         task.Task // the task as its last write left it, Payload and After aside
	rowVer    int64     // the version of its row
	rowStatus task.Status
	flushAt   time.Time
}

// over returns the entry's task, with the payload and the upstreams of row, its row as read
// (writes never change those).
func (e *volatileEntry) over(row task.Task) task.Task {
	t := e.t
	t.Payload, t.After = row.Payload, row.After
	return t
}

type taskKey struct{ lambda, id string }

// volatile holds the entries. The writer goroutine alone changes them, after the commit of the
// group that made the change; readers look under the read lock.
type volatile struct {
	mu      sync.RWMutex
	entries map[taskKey]*volatileEntry

	// gen is odd from just before a commit that changes entries until its changes are applied,
	// while applying is held: a read of rows and entries that saw it even and unchanged saw both
	// at one point (see steady).
	gen      atomic.Uint64
	applying sync.Mutex

	// keep is false for a file whose journal has no path (a "file:" URI): its claims are written.
	keep bool

	journalPath  string   // "" for a database in memory (nothing outlives the process) or a URI
	journal      *os.File // appended to by the writer only
	journalBytes int64
	liveBytes    int64 // the journal's size at its last rewrite: its live entries' lines
}

// beginApply and endApply bracket a commit that changes entries and the apply of its changes.
func (v *volatile) beginApply() { v.applying.Lock(); v.gen.Add(1) }
func (v *volatile) endApply()   { v.gen.Add(1); v.applying.Unlock() }

// steady runs read, a read of rows then of entries, until no commit that changes entries came
// between the two: the rows then never show a write whose entry the entries still hold.
func (v *volatile) steady(read func() error) error {
	for {
		g := v.gen.Load()
		if g%2 == 1 {
			v.applying.Lock() // waits for the apply under way
			g = v.gen.Load()  // even: no apply is under way while applying is free
			v.applying.Unlock()
		}
		if err := read(); err != nil || v.gen.Load() == g {
			return err
		}
	}
}

func (v *volatile) lookup(k taskKey) (*volatileEntry, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.entries[k]
	return e, ok
}

// staged is one group's changes to the entries, applied once the group commits: a nil entry is
// one dropped.
type staged map[taskKey]*volatileEntry

// entry is the entry of k as the group sees it: its own change first, then the committed one.
func (s *Store) entry(g staged, k taskKey) *volatileEntry {
	if e, ok := g[k]; ok {
		return e
	}
	e, _ := s.vol.lookup(k)
	return e
}

// volatileUpdate is updateIn for the stores with entries: see the package's "Claims kept in
// memory". keep tells that the update came through the Volatile view, whose claims may stay in
// memory.
func (s *Store) volatileUpdate(ctx context.Context, stmts updateStmts, g staged, t task.Task, prev int64, keep bool) (outcome, err error) {
	k := taskKey{t.Lambda, t.ID}
	keepable := keep && s.vol.keep && slices.Contains(task.Running, t.Status) && len(t.Limits.Of(t)) == 0
	if e := s.entry(g, k); e != nil {
		if prev != e.t.Version {
			return task.Errorf(task.ErrConflict, "task %q of lambda %s changed meanwhile", t.ID, t.Lambda), nil
		}
		// A heartbeat stays in memory. Any other change of a running task (a rearm, which gives
		// the lease to the store's timer; a downstream's mark; a cancel) is written.
		if keepable && heartbeat(e.t, t) {
			next := *e
			next.t = t
			g[k] = &next
			return nil, nil
		}
		if outcome, err = updateIn(ctx, stmts, t, e.rowVer); outcome == nil && err == nil {
			g[k] = nil
		}
		return outcome, err
	}
	if keepable {
		// The row itself, not the writer's memo: a write apart from the group writer
		// (AddUpstreams) moves a row without telling the memo.
		old, found, err := statusAt(ctx, stmts.readStatus, t, prev)
		switch {
		case err != nil:
			return nil, fmt.Errorf("sqlitestore: claim %s/%s: %w", t.Lambda, t.ID, err)
		case !found:
			return conflict(t), nil
		case old == task.StatusEnqueued:
			g[k] = &volatileEntry{t: t, rowVer: prev, rowStatus: task.StatusEnqueued, flushAt: flushTime(t)}
			return nil, nil
		}
	}
	return updateIn(ctx, stmts, t, prev)
}

// heartbeat reports whether next differs from prev only as a heartbeat makes it (task.Heartbeat):
// its version, times and lease end.
func heartbeat(prev, next task.Task) bool {
	for _, t := range []*task.Task{&prev, &next} {
		t.Version, t.UpdatedAt, t.NextTriggerAt, t.From, t.Ended, t.Nonce = 0, time.Time{}, nil, "", nil, ""
		t.Payload, t.After = nil, nil
	}
	return reflect.DeepEqual(prev, next)
}

// flushTime is when the claim t, kept now, is written to its row: FlushAfter from now, or halfway
// to its lease's end if that is sooner.
func flushTime(t task.Task) time.Time {
	now := time.Now()
	wait := FlushAfter
	if t.NextTriggerAt != nil {
		wait = min(wait, t.NextTriggerAt.Sub(now)/2)
	}
	return now.Add(wait)
}

// dueToFlush returns the keys of the entries whose time in memory is up at now.
func (s *Store) dueToFlush(now time.Time) []taskKey {
	s.vol.mu.RLock()
	defer s.vol.mu.RUnlock()
	var due []taskKey
	for k, e := range s.vol.entries {
		if !now.Before(e.flushAt) {
			due = append(due, k)
		}
	}
	return due
}

// flushDue writes, in the group's transaction, the entries whose time in memory is up.
func (s *Store) flushDue(ctx context.Context, stmts updateStmts, g staged, now time.Time) error {
	for _, k := range s.dueToFlush(now) {
		e := s.entry(g, k)
		if e == nil {
			continue
		}
		if _, err := updateIn(ctx, stmts, e.t, e.rowVer); err != nil {
			return err
		}
		// Only writes through the entry move its row, so a flush does not conflict; if one did,
		// the row is the task's state, and the entry's claim is lost as to a crash: it is
		// dropped rather than fail every group after it.
		g[k] = nil
	}
	return nil
}

// apply makes a committed group's changes to the entries, and journals its new claims. It
// returns the keys of the claims it could not journal: their updates must fail.
func (s *Store) apply(g staged) (unjournaled map[taskKey]bool) {
	if len(g) == 0 {
		return nil
	}
	var lines []byte
	var fresh []taskKey
	s.vol.mu.RLock()
	for k, e := range g {
		// A new claim: no entry before, or one of an earlier claim, which the group wrote to
		// its row and dropped before it kept this one (a heartbeat keeps its row's version).
		if old, had := s.vol.entries[k]; e != nil && (!had || old.rowVer != e.rowVer) {
			fresh = append(fresh, k)
			lines = appendJournal(lines, e)
		}
	}
	s.vol.mu.RUnlock()
	if len(lines) > 0 && s.vol.journalPath != "" {
		err := s.appendToJournal(lines)
		if err != nil {
			unjournaled = map[taskKey]bool{}
			for _, k := range fresh {
				unjournaled[k] = true
				g[k] = nil // the claim fails: its row is as the group left it, and any entry before it is gone
			}
		}
	}
	s.vol.mu.Lock()
	for k, e := range g {
		if e == nil {
			delete(s.vol.entries, k)
		} else {
			s.vol.entries[k] = e
		}
	}
	idle := len(s.vol.entries) == 0
	s.vol.mu.Unlock()
	switch {
	case idle && s.vol.journalBytes > 0 && s.vol.journal != nil:
		// No claim in memory: none of the journal's lines can be lost to a crash now.
		if s.vol.journal.Truncate(0) == nil {
			s.vol.journalBytes = 0
		}
	case s.vol.journalBytes > max(journalRewriteBytes, 2*s.vol.liveBytes):
		s.rewriteJournal()
	}
	return unjournaled
}

// appendToJournal writes lines at the journal's end, opening it at its first claim.
func (s *Store) appendToJournal(lines []byte) error {
	if s.vol.journal == nil {
		f, err := os.OpenFile(s.vol.journalPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		s.vol.journal = f
	}
	if _, err := s.vol.journal.Write(lines); err != nil {
		// Lines written whole would name claims that fail: the journal goes back to its end
		// before them.
		_ = s.vol.journal.Truncate(s.vol.journalBytes)
		return err
	}
	s.vol.journalBytes += int64(len(lines))
	return nil
}

// appendJournal appends e's journal line: the claim's start, its row's version and creation
// time (a task of the same id created after a prune has its own), lambda and id (names that
// hold no tab nor newline: task.ValidateName, task.ValidateID), and an end mark. A line is
// written after a newline, so that the fragment of a failed write before it ends there, and a
// line without its end mark (a write cut short) is not read.
func appendJournal(b []byte, e *volatileEntry) []byte {
	started := time.Now()
	if e.t.StartedAt != nil {
		started = *e.t.StartedAt
	}
	b = append(b, '\n')
	b = strconv.AppendInt(b, started.UnixNano(), 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, e.rowVer, 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, e.t.CreatedAt.UnixNano(), 10)
	b = append(b, '\t')
	b = append(b, e.t.Lambda...)
	b = append(b, '\t')
	b = append(b, e.t.ID...)
	return append(b, "\t."...)
}

// journalLine is one claim read back from the journal.
type journalLine struct {
	started, version, created int64
	lambda, id                string
}

// parseJournal reads the claims of a journal's contents, skipping what is not a whole line: a
// power loss may leave its unsynced tail as anything.
func parseJournal(data []byte) []journalLine {
	var out []journalLine
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 6 || f[5] != "." || task.ValidateName("lambda name", f[3]) != nil || task.ValidateID("task id", f[4]) != nil {
			continue
		}
		started, err1 := strconv.ParseInt(f[0], 10, 64)
		version, err2 := strconv.ParseInt(f[1], 10, 64)
		created, err3 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, journalLine{started, version, created, f[3], f[4]})
	}
	return out
}

// rewriteJournal replaces the journal with the lines of the live entries, so that it stays
// about as large as they are. A failure leaves the journal as it was, growing.
func (s *Store) rewriteJournal() {
	s.vol.mu.RLock()
	var lines []byte
	for _, e := range s.vol.entries {
		lines = appendJournal(lines, e)
	}
	s.vol.mu.RUnlock()
	tmp := s.vol.journalPath + ".tmp"
	if err := os.WriteFile(tmp, lines, 0o644); err != nil {
		return
	}
	if err := os.Rename(tmp, s.vol.journalPath); err != nil {
		return
	}
	// The file written is the journal now; the next claim opens it.
	if s.vol.journal != nil {
		_ = s.vol.journal.Close()
	}
	s.vol.journal, s.vol.journalBytes, s.vol.liveBytes = nil, int64(len(lines)), int64(len(lines))
}

// failJournaled fails the claims of the group that could not be journaled (they were not kept:
// their rows are as the group found them).
func failJournaled(group []*update, outcomes []error, unjournaled map[taskKey]bool) {
	err := errors.New("sqlitestore: a claim could not be journaled; it was not made")
	for i, u := range group {
		if u.many != nil {
			for j, w := range u.many {
				if u.manyDone[j] == nil && unjournaled[taskKey{w.Task.Lambda, w.Task.ID}] {
					u.manyDone[j] = err
				}
			}
		} else if u.create == nil && outcomes[i] == nil && unjournaled[taskKey{u.t.Lambda, u.t.ID}] {
			outcomes[i] = err
		}
	}
}

// openVolatile gives s its entries, and writes the claims its journal holds from the last
// process as they would have been written: each whose row is still enqueued at the version the
// claim found becomes processing, its attempt counted and its lease over.
func (s *Store) openVolatile(path string) error {
	s.vol = &volatile{entries: map[taskKey]*volatileEntry{}, keep: true}
	if path == ":memory:" {
		return nil // nothing outlives the process: no claim to count after a crash
	}
	if strings.HasPrefix(path, "file:") {
		s.vol.keep = false // a URI names its file in ways a journal's name cannot follow
		return nil
	}
	s.vol.journalPath = path + "-claims"
	if err := s.recoverClaims(); err != nil {
		return err
	}
	// Its claims are written: the next process must not count them again.
	if err := os.Remove(s.vol.journalPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sqlitestore: empty the claims journal: %w", err)
	}
	return nil
}

// maxJournalRead bounds what Open reads of a journal: the live claims' lines are far fewer
// (journalRewriteBytes), so more can only be a tail a power loss left.
const maxJournalRead = 64 << 20

// recoverClaims writes the journal's lost claims, synced, before the journal is emptied. Only
// an error reading the file or writing the store fails it, never what the file holds.
func (s *Store) recoverClaims() error {
	f, err := os.Open(s.vol.journalPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: read the claims journal: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxJournalRead))
	f.Close()
	if err != nil {
		return fmt.Errorf("sqlitestore: read the claims journal: %w", err)
	}
	lines := parseJournal(data)
	if len(lines) == 0 {
		return nil
	}
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlitestore: recover claims: %w", err)
	}
	defer tx.Rollback()
	defer s.memo.abort() // unless the commit kept its notes first
	stmts := updateStmts{tx: tx, state: tx.StmtContext(ctx, s.updateState), full: tx.StmtContext(ctx, s.update),
		record: tx.StmtContext(ctx, s.record), drop: tx.StmtContext(ctx, s.drop), readStatus: tx.StmtContext(ctx, s.readStatus),
		counts: tally{}, memo: s.memo}
	for _, l := range lines {
		t, err := scanTask(tx.QueryRowContext(ctx, getStateSQL, l.lambda, l.id))
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sqlitestore: recover claims: %w", err)
		}
		if t.Version != l.version || t.CreatedAt.UnixNano() != l.created || t.Status != task.StatusEnqueued {
			continue // the claim ended, was written, or never took; or the id is another task's now
		}
		claimed, err := task.Claim(t, task.NewLease(), time.Unix(0, l.started).UTC(), task.Config{})
		if err != nil {
			continue
		}
		// Not the lost claim's version: a runner of it in this process (a Close and an Open with
		// executors still running) must not write over this one.
		claimed.Version++
		if outcome, err := updateIn(ctx, stmts, claimed, l.version); err != nil || outcome != nil {
			return fmt.Errorf("sqlitestore: recover the claim of %s/%s: %w", t.Lambda, t.ID, errors.Join(err, outcome))
		}
	}
	if err := stmts.counts.write(ctx, tx.StmtContext(ctx, s.count)); err != nil {
		return fmt.Errorf("sqlitestore: recover claims: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlitestore: recover claims: %w", err)
	}
	s.memo.commit()
	return nil
}

// live reads a task by key with read, and returns it as its entry has it, if it has one. An entry
// dropped while the row was read was written to the row first: the row is read again.
func (s *Store) live(lambda, id string, read func() (task.Task, error)) (task.Task, error) {
	k := taskKey{lambda, id}
	_, before := s.vol.lookup(k)
	t, err := read()
	if err != nil {
		return t, err
	}
	if e, ok := s.vol.lookup(k); ok {
		return e.over(t), nil
	}
	if before {
		return read()
	}
	return t, nil
}

// liveAll replaces the tasks that have an entry with it, in place (reads of many rows: GetMany,
// lists). A row read before its entry was dropped may be older than the entry was: it returns
// the indexes of the tasks that had an entry before the rows were read (kept: keptAmong) and
// have none now, for a caller that needs the latest state to read again.
func (s *Store) liveAll(tasks []task.Task, kept map[task.Ref]bool) (gone []int) {
	s.vol.mu.RLock()
	defer s.vol.mu.RUnlock()
	for i, t := range tasks {
		if t.ID == "" {
			continue
		}
		if e, ok := s.vol.entries[taskKey{t.Lambda, t.ID}]; ok {
			tasks[i] = e.over(t)
		} else if kept[t.Ref()] {
			gone = append(gone, i)
		}
	}
	return gone
}

// keptAmong returns the refs that have an entry now.
func (s *Store) keptAmong(refs []task.Ref) map[task.Ref]bool {
	s.vol.mu.RLock()
	defer s.vol.mu.RUnlock()
	if len(s.vol.entries) == 0 {
		return nil
	}
	kept := map[task.Ref]bool{}
	for _, r := range refs {
		if _, ok := s.vol.entries[taskKey{r.Lambda, r.ID}]; ok {
			kept[r] = true
		}
	}
	return kept
}

// liveCounts moves the counts of the lambda's entries from their rows' status to theirs.
func (s *Store) liveCounts(lambda string, counts map[task.Status]int) {
	s.vol.mu.RLock()
	defer s.vol.mu.RUnlock()
	for k, e := range s.vol.entries {
		if k.lambda != lambda || e.rowStatus == e.t.Status {
			continue
		}
		counts[e.rowStatus]--
		counts[e.t.Status]++
		if counts[e.rowStatus] <= 0 {
			delete(counts, e.rowStatus)
		}
	}
}

// Volatile is the Unsynced view whose claims stay in memory (see "Claims kept in memory"): for
// the status controller of the executors of this process, whose runs die with it. A claim made
// through another view, one a process elsewhere may run, is written.
type Volatile struct{ *Store }

// Volatile returns the view of s whose claims stay in memory.
func (s *Store) Volatile() Volatile { return Volatile{s} }

// Update writes t as Unsynced.Update does, or keeps it in memory: a claim of an enqueued task,
// or a heartbeat of a claim kept so.
func (v Volatile) Update(ctx context.Context, t task.Task, prev int64) error {
	return v.write(ctx, &update{t: t, prev: prev, unsynced: true, volatile: true, done: make(chan error, 1)}, t)
}

// UpdateMany writes each update like Update, in one commit.
func (v Volatile) UpdateMany(ctx context.Context, ws []task.Versioned) []error {
	return v.updateMany(ctx, ws, true, true)
}
