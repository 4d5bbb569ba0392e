// Package sqlitestore is the embedded task.Store: one SQLite file, so `atf dev` and tests run the
// whole framework with no service to start. It uses the pure-Go driver modernc.org/sqlite, so atf
// builds without cgo, and it syncs every commit (WAL with synchronous=FULL), so a task that was
// accepted survives a crash or a restart of the process, and a power loss. The Unsynced view
// writes transitions that may be lost to a power loss (not to a crash of the process): those of
// the services that run tasks, whose loss only makes a task run again (docs/guarantees.md). The
// Volatile view keeps the claims of short runs in memory (volatile.go): a task that succeeds at
// once writes its row twice, at its create and at its end.
//
// A file has one Store open on it at a time (atf dev takes a lock on it, shared/local): the
// store's writer counts the tasks' moves in Go (counts.go), remembers what it wrote, and keeps
// claims in memory. An app's transaction may create tasks in it alongside (CreateTx).
package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openatf/atf/shared/task"
	"modernc.org/sqlite" // registers the "sqlite" driver; its errors carry SQLite's codes
	sqlite3 "modernc.org/sqlite/lib"
)

// Times are INTEGER unix nanoseconds, NULL for a nil pointer (or a zero time). Payload and
// result are BLOBs, NULL when absent. A task's upstreams (task.Task.After) are rows of deps, its
// edges: after_count says how many.
const schema = `
CREATE TABLE IF NOT EXISTS tasks (
	lambda          TEXT    NOT NULL,
	id              TEXT    NOT NULL,
	collection      TEXT    NOT NULL,
	priority        TEXT    NOT NULL,
	status          TEXT    NOT NULL,
	payload         BLOB,
	result          BLOB,
	error           TEXT    NOT NULL,
	attempts        INTEGER NOT NULL,
	max_attempts    INTEGER NOT NULL,
	run_at          INTEGER,
	deadline        INTEGER,
	next_trigger_at INTEGER,
	created_at      INTEGER,
	updated_at      INTEGER,
	version         INTEGER NOT NULL,
	lease           TEXT    NOT NULL,
	spec            TEXT    NOT NULL,
	parked          INTEGER NOT NULL DEFAULT 0,
	after_count     INTEGER NOT NULL DEFAULT 0,
	trigger_rule    TEXT    NOT NULL DEFAULT '',
	settled         BLOB,
	downstream      INTEGER NOT NULL DEFAULT 0,
	notify_cursor   TEXT    NOT NULL DEFAULT '',
	cancel_requested INTEGER NOT NULL DEFAULT 0,
	not_before      INTEGER,
	hand_backs      INTEGER NOT NULL DEFAULT 0,
	attempt_seq     INTEGER NOT NULL DEFAULT 0,
	started_at      INTEGER,
	ended_at        INTEGER,
	worker          TEXT    NOT NULL DEFAULT '',
	log_location    TEXT,
	snoozes         INTEGER NOT NULL DEFAULT 0,
	queue_message   TEXT    NOT NULL DEFAULT '',
	queue_message_for TEXT  NOT NULL DEFAULT '',
	task_key        TEXT    NOT NULL DEFAULT '',
	rate_slot       INTEGER,
	PRIMARY KEY (lambda, id)
);
CREATE INDEX IF NOT EXISTS tasks_by_created ON tasks (lambda, created_at, id);
CREATE INDEX IF NOT EXISTS tasks_by_status ON tasks (lambda, status, created_at, id);
-- Lists by collection. A task's collection and creation time never change, so only Create
-- writes it.
CREATE INDEX IF NOT EXISTS tasks_by_collection ON tasks (lambda, collection, created_at, id);
-- The sweep's index: a lane, then trigger order, as dynamostore's due_sk (see laneSQL). Status
-- and collection come last, so the sweep's filters on them read the index, not the rows. Terminal
-- tasks have no trigger; leaving them out keeps the index small.
CREATE INDEX IF NOT EXISTS tasks_due_lane ON tasks (lambda, ` + laneSQL + `, next_trigger_at, id, status, collection)
	WHERE next_trigger_at IS NOT NULL;
-- The sweep's index before the lanes, on (lambda, next_trigger_at): a file made by an older atf
-- loses it here and gains tasks_due_lane above.
DROP INDEX IF EXISTS tasks_due;
-- Parked tasks by collection: the consumer reads one collection's, or jumps over a held one.
CREATE INDEX IF NOT EXISTS tasks_parked ON tasks (lambda, collection, next_trigger_at, id) WHERE parked = 1;

-- The dead letters across lambdas (ListFailed): one index per status of task.Failed (failedSchema).

-- Counts by status, written in the transaction of the writes they count: reading them costs one
-- row per status, whatever the number of tasks. Moves and deletes are counted in Go, once per
-- transaction and count row; inserts by this trigger, whatever the atf version of the app's
-- transaction that inserts (CreateTx). See counts.go.
CREATE TABLE IF NOT EXISTS task_counts (
	lambda TEXT    NOT NULL,
	status TEXT    NOT NULL,
	n      INTEGER NOT NULL,
	PRIMARY KEY (lambda, status)
);
CREATE TRIGGER IF NOT EXISTS task_counts_insert AFTER INSERT ON tasks BEGIN
	INSERT INTO task_counts (lambda, status, n) VALUES (new.lambda, new.status, 1)
		ON CONFLICT (lambda, status) DO UPDATE SET n = n + 1;
END;

-- A task's upstreams: the row (down, idx) says that task down waits for task up, its After[idx].
-- Create writes them with the task, and AddUpstreams with its new version, in one transaction, so
-- they are also the edges task.FlowStore keeps: deps_by_up finds an upstream's downstreams.
CREATE TABLE IF NOT EXISTS deps (
	down_lambda TEXT    NOT NULL,
	down_id     TEXT    NOT NULL,
	idx         INTEGER NOT NULL,
	up_lambda   TEXT    NOT NULL,
	up_id       TEXT    NOT NULL,
	PRIMARY KEY (down_lambda, down_id, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deps_by_up ON deps (up_lambda, up_id, down_lambda, down_id, idx);

-- Periodic schedules (task/schedule.go): body is the schedule as JSON; state, next_fire and
-- version are columns for the consumer's due read and the conditional writes.
CREATE TABLE IF NOT EXISTS schedules (
	lambda    TEXT    NOT NULL,
	id        TEXT    NOT NULL,
	state     TEXT    NOT NULL,
	next_fire INTEGER NOT NULL,
	version   INTEGER NOT NULL,
	body      BLOB    NOT NULL,
	PRIMARY KEY (lambda, id)
) WITHOUT ROWID;
-- The due read: active schedules only, in fire order.
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (lambda, next_fire, id) WHERE state = 'active';

-- attempts keeps each task's latest task.MaxHistory ended attempts (task.HistoryStore), written
-- in the transaction of the transition that ends one, and deleted with their task.
CREATE TABLE IF NOT EXISTS attempts (
	lambda     TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	attempt    INTEGER NOT NULL,
	started_at INTEGER,
	ended_at   INTEGER NOT NULL,
	outcome    TEXT    NOT NULL,
	error      TEXT    NOT NULL,
	worker     TEXT    NOT NULL,
	log        TEXT    NOT NULL DEFAULT '',
	log_location TEXT,
	PRIMARY KEY (lambda, id, attempt)
);
CREATE TRIGGER IF NOT EXISTS attempts_of_deleted AFTER DELETE ON tasks BEGIN
	DELETE FROM attempts WHERE lambda = old.lambda AND id = old.id;
END;

CREATE TABLE IF NOT EXISTS tombstones (
	lambda     TEXT NOT NULL,
	id         TEXT NOT NULL,
	nonce      TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (lambda, id, nonce)
);

CREATE TABLE IF NOT EXISTS gates (
	lambda     TEXT NOT NULL,
	collection TEXT NOT NULL,
	mode       TEXT NOT NULL,
	updated_at INTEGER,
	PRIMARY KEY (lambda, collection)
);`

// laneSQL is a task's due lane, the expression tasks_due_lane indexes: running tasks (claimed,
// processing) share the lane 'r', enqueued tasks the lane 'e' (their trigger is the enqueue
// timeout: due when their message may be lost), the other waiting tasks (new, retriable) have one
// lane per priority, 'w#<priority>', and parked tasks one of their own, 'p', which the consumer
// reads through tasks_parked instead. Task flows' pending tasks (due for their check) and ended
// tasks (only those with downstreams to tell have a trigger) share the lane 'f', as on DynamoDB,
// so that a pass reads both at once (see task/flow.go). The consumer's due queries each read one
// lane in trigger order and stop at their limit, so neither the waiting backlog slows the timeout
// sweep or the resends, nor one priority's backlog another's, nor a flow's checks and notices the
// rest. The expression is kept short: every due query carries it, and SQLite parses it each time.
// Queries must use this very expression for SQLite to match it with the index; a file whose
// index has another is reindexed on open (migrate).
const laneSQL = `(CASE WHEN parked = 1 THEN 'p' WHEN status IN ('claimed', 'processing') THEN 'r' WHEN status = 'enqueued' THEN 'e' WHEN status IN ('new', 'retriable_failure') THEN 'w#' || priority ELSE 'f' END)`

// laneOf is the lane laneSQL gives a task that is not parked.
func laneOf(s task.Status, priority string) string {
	switch {
	case slices.Contains(task.Running, s):
		return "r"
	case s == task.StatusEnqueued:
		return "e"
	case s == task.StatusNew, s == task.StatusRetriableFailure:
		return "w#" + priority
	}
	return "f" // pending, or ended
}

const columns = `lambda, id, collection, priority, status, payload, result, error, attempts, max_attempts,
	run_at, deadline, next_trigger_at, created_at, updated_at, version, lease, spec, parked,
	after_count, trigger_rule, settled, downstream, notify_cursor, cancel_requested, not_before, hand_backs,
	attempt_seq, started_at, ended_at, worker, log_location, snoozes, queue_message, queue_message_for, task_key, rate_slot`

// stateColumns are columns without the payload, which scanTask reads as nil.
var stateColumns = strings.Replace(columns, "payload", "NULL", 1)

// getStateSQL reads one task without its payload (GetState).
var getStateSQL = `SELECT ` + stateColumns + ` FROM tasks WHERE lambda = ? AND id = ?`

// Store is a task.Store in one SQLite file.
type Store struct {
	// SQLite allows one writer at a time. Funnelling every write through one connection queues
	// writers in Go instead of letting them fail with SQLITE_BUSY; in WAL mode readers never wait
	// for the writer, so they get a pool of their own.
	w, r *sql.DB

	// Task writes are group-committed: one goroutine writes those waiting in one transaction, so
	// concurrent transitions and creations share a commit and its fsync instead of queueing for
	// one each.
	update, insert *sql.Stmt
	taken          *sql.Stmt // takenSQL, a create's check of its ids
	updateState    *sql.Stmt // updateStateSQL, tried before update
	get            *sql.Stmt // prepared once: parsing the SQL of every Get cost more than running it
	getState       *sql.Stmt // Get without the payload
	getStates      *sql.Stmt // GetMany's: getManySQL(stateColumns)
	getTasks       *sql.Stmt // GetBatch's: getManySQL(columns)
	getAfter       *sql.Stmt // a task's upstreams, for Get
	record, drop   *sql.Stmt // recordSQL and dropSQL (history.go)
	history        *sql.Stmt // historySQL
	count          *sql.Stmt // countSQL (counts.go)
	readStatus     *sql.Stmt // statusSQL (counts.go)
	// memo is what the group writer wrote last: the status an update replaces, without a read.
	memo       *statusMemo
	queries    sync.Map // the queries of lists and sweeps, prepared once each: string → *sql.Stmt
	queryCount atomic.Int32
	updates    chan *update
	closed     chan struct{}
	closeOnce  sync.Once
	writer     sync.WaitGroup
	pruner     sync.WaitGroup // the pruning job, if OpenWith started one (retention.go)

	traced func(q string, args []any) // if set (by tests), sees every query of tasks run by List and Due

	vol *volatile // the claims kept in memory (volatile.go)
}

// update is one Update, or one CreateBatch, waiting for the group writer.
type update struct {
	t      task.Task
	prev   int64
	create []task.Task // a CreateBatch: these tasks, all or none
	// payload writes t's payload too, in the same transaction (a Redrive).
	payload bool
	// unsynced is set by the Unsynced view: the commit need not wait for an fsync of its own.
	unsynced bool
	// volatile is set by the Volatile view: a claim may stay in memory (volatile.go).
	volatile bool
	// many is an UpdateMany: these updates, in one group, each with its own outcome in manyDone;
	// done then receives nil, or the error that failed them all.
	many     []task.Versioned
	manyDone []error
	// done receives the outcome once the write is committed or has failed. The writer answers
	// each update exactly once and done has room for that answer, so answering never blocks the
	// writer, also when the caller has stopped waiting.
	done chan error
}

// maxGroup bounds the updates of one commit, so that a long queue is not held back by one
// very large transaction.
const maxGroup = 256

var (
	_ task.Store       = (*Store)(nil)
	_ task.StateReader = (*Store)(nil)
	_ task.Store       = Unsynced{}
)

// Open opens the database file at path, creating it and its schema if missing.
func Open(path string) (*Store, error) {
	if strings.ContainsRune(path, '?') {
		// The driver reads everything after '?' as connection parameters.
		return nil, fmt.Errorf("sqlitestore: open %s: the path must not contain '?'", path)
	}
	// busy_timeout still matters: another process may hold the file, and readers can meet a
	// checkpoint.
	const common = "?_pragma=busy_timeout(10000)"
	// The writer's transactions begin immediate: they read before they write (a create checks
	// its id), and an app's transaction on the file (CreateTx) that commits in between would
	// otherwise fail the write at once (SQLITE_BUSY), whatever the busy timeout. Immediate, the
	// writer waits for the app's lock before it reads.
	w, err := sql.Open("sqlite", path+common+"&_txlock=immediate&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	if err := migrate(w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	if _, err := w.Exec(schema + failedSchema + limitsSchema); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: create schema: %w", path, err)
	}
	if err := migrateExpiry(w); err != nil { // retention.go
		w.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: create the expiry index: %w", path, err)
	}
	if err := dropCountTriggers(w); err != nil { // counts.go
		w.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: drop the count triggers of an older atf: %w", path, err)
	}
	r, err := sql.Open("sqlite", path+common+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(max(4, runtime.NumCPU()))
	// Every reader stays open: a statement is prepared on each connection that runs it, and a
	// connection closed as idle (database/sql keeps 2) takes its statements with it, to be
	// parsed again on the next one.
	r.SetMaxIdleConns(max(4, runtime.NumCPU()))
	// Each statement is prepared on the connection that runs it; if one fails, what was opened
	// so far is closed, last first.
	opened := []io.Closer{r, w}
	prepare := func(db *sql.DB, q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		if st, err = db.Prepare(q); err == nil {
			opened = append(opened, st)
		}
		return st
	}
	upd := prepare(w, updateSQL)
	updState := prepare(w, updateStateSQL)
	get := prepare(r, `SELECT `+columns+` FROM tasks WHERE lambda = ? AND id = ?`)
	getState := prepare(r, getStateSQL)
	getStates := prepare(r, getManySQL(stateColumns))
	getTasks := prepare(r, getManySQL(columns))
	ins := prepare(w, insertSQL)
	taken := prepare(w, takenSQL)
	getAfter := prepare(r, upstreamsSQL)
	record := prepare(w, recordSQL)
	drop := prepare(w, dropSQL)
	history := prepare(r, historySQL)
	count := prepare(w, countSQL)
	readStatus := prepare(w, statusSQL)
	if err != nil {
		for i := len(opened) - 1; i >= 0; i-- {
			_ = opened[i].Close() // the prepare's error is the one to report
		}
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	s := &Store{w: w, r: r, update: upd, updateState: updState, insert: ins, taken: taken, get: get, getState: getState, getStates: getStates, getTasks: getTasks, getAfter: getAfter, record: record, drop: drop, history: history,
		count: count, readStatus: readStatus, memo: newStatusMemo(), updates: make(chan *update), closed: make(chan struct{})}
	if err := s.openVolatile(path); err != nil {
		for i := len(opened) - 1; i >= 0; i-- {
			_ = opened[i].Close()
		}
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	s.writer.Go(s.writeUpdates)
	return s, nil
}

// Close closes the database. Updates in flight finish first; later ones fail. A group whose
// commit failed is not retried update by update once Close is called: its updates fail, so Close
// waits for one commit at most, not one per update.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	s.writer.Wait()
	s.pruner.Wait()
	var journal error
	if s.vol.journal != nil {
		journal = s.vol.journal.Close()
	}
	return errors.Join(journal, s.update.Close(), s.updateState.Close(), s.insert.Close(), s.taken.Close(), s.get.Close(), s.getState.Close(), s.getStates.Close(), s.getTasks.Close(), s.getAfter.Close(), s.record.Close(), s.drop.Close(), s.history.Close(), s.count.Close(), s.readStatus.Close(), s.closeQueries(), s.r.Close(), s.w.Close())
}

// Create stores a new task, or returns task.ErrExists.
func (s *Store) Create(ctx context.Context, t task.Task) error {
	return s.CreateBatch(ctx, []task.Task{t})
}

// CreateBatch stores every task in one transaction, or none of them. It is group-committed with
// the writes waiting alongside it, and returns once it is synced.
func (s *Store) CreateBatch(ctx context.Context, tasks []task.Task) error {
	if err := task.CheckBatch(tasks); err != nil {
		return err
	}
	if len(tasks) == 0 {
		return nil
	}
	return s.write(ctx, &update{create: tasks, done: make(chan error, 1)}, tasks[0])
}

const insertSQL = `INSERT INTO tasks (` + columns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (lambda, id) DO NOTHING`

// Get returns one task, with its upstreams, or task.ErrNotFound. A task without upstreams costs
// one read, as before flows.
func (s *Store) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	return s.live(lambda, id, func() (task.Task, error) { return s.getRow(ctx, lambda, id) })
}

// getRow is Get from the row alone.
func (s *Store) getRow(ctx context.Context, lambda, id string) (task.Task, error) {
	row := s.get.QueryRowContext(ctx, lambda, id)
	t, err := scanTask(row)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", id, lambda)
	case err != nil:
		return task.Task{}, fmt.Errorf("sqlitestore: get %s/%s: %w", lambda, id, err)
	}
	if t.AfterCount > 0 {
		// The rows below after_count were committed with it and never change, so this second
		// read agrees with the first whatever was written in between.
		if t.After, err = upstreams(ctx, s.getAfter, t.Ref(), 0, t.AfterCount); err != nil {
			return task.Task{}, fmt.Errorf("sqlitestore: get %s/%s: %w", lambda, id, err)
		}
	}
	return t, nil
}

// GetState returns one task without its payload nor its upstreams (task.StateReader): the
// transitions of a run (heartbeats, results, releases) need neither, and Update writes neither.
func (s *Store) GetState(ctx context.Context, lambda, id string) (task.Task, error) {
	return s.live(lambda, id, func() (task.Task, error) { return s.getStateRow(ctx, lambda, id) })
}

// getStateRow is GetState from the row alone.
func (s *Store) getStateRow(ctx context.Context, lambda, id string) (task.Task, error) {
	t, err := scanTask(s.getState.QueryRowContext(ctx, lambda, id))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return task.Task{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", id, lambda)
	case err != nil:
		return task.Task{}, fmt.Errorf("sqlitestore: get %s/%s: %w", lambda, id, err)
	}
	return t, nil
}

// updateSQL leaves the payload and the key alone: Create sets them once (task.Store.Update). It leaves the
// upstreams alone too (after_count with the deps rows, and the trigger rule, set once):
// AddUpstreams writes them.
const updateSQL = `UPDATE tasks SET
	collection = ?, priority = ?, status = ?, result = ?, error = ?, attempts = ?,
	max_attempts = ?, run_at = ?, deadline = ?, next_trigger_at = ?, created_at = ?,
	updated_at = ?, version = ?, lease = ?, spec = ?, parked = ?,
	settled = ?, downstream = ?, notify_cursor = ?, cancel_requested = ?, not_before = ?, hand_backs = ?,
	attempt_seq = ?, started_at = ?, ended_at = ?, worker = ?, log_location = ?, snoozes = ?, queue_message = ?, queue_message_for = ?,
	rate_slot = ?
	WHERE lambda = ? AND id = ? AND version = ? AND status = ?`

// updateStateSQL is updateSQL for a task whose collection, priority and creation time are as
// stored: every transition's. SQLite rewrites a row's entry in every index with a column the SET
// names, whatever its value, so leaving these three out spares two of the five indexes
// (tasks_by_created, tasks_by_collection) on every transition. They are conditions instead: an
// update that would change them matches no row, and updateSQL writes it.
//
// Both name the status they replace, with the version: the counts move from that status
// (counts.go), so an update whose status is not the stored one must match no row. The version
// alone pins the status of the group writer's own writes; the status guards the others.
const updateStateSQL = `UPDATE tasks SET
	status = ?, result = ?, error = ?, attempts = ?,
	max_attempts = ?, run_at = ?, deadline = ?, next_trigger_at = ?,
	updated_at = ?, version = ?, lease = ?, spec = ?, parked = ?,
	settled = ?, downstream = ?, notify_cursor = ?, cancel_requested = ?, not_before = ?, hand_backs = ?,
	attempt_seq = ?, started_at = ?, ended_at = ?, worker = ?, log_location = ?, snoozes = ?, queue_message = ?, queue_message_for = ?,
	rate_slot = ?
	WHERE lambda = ? AND id = ? AND version = ? AND status = ? AND collection = ? AND priority = ? AND created_at IS ?`

// updateStateArgs are updateStateSQL's arguments for t written over version prev, in status old.
func updateStateArgs(t task.Task, prev int64, old task.Status) []any {
	return []any{string(t.Status), blob(t.Result), t.Error,
		t.Attempts, t.MaxAttempts, nanos(t.RunAt), ptrNanos(t.Deadline), ptrNanos(t.NextTriggerAt),
		nanos(t.UpdatedAt), t.Version, t.Lease, t.Spec, t.Parked,
		blob(t.Settled), t.Downstream, t.NotifyCursor, t.CancelRequested, ptrNanos(t.NotBefore), t.HandBacks,
		t.AttemptSeq, ptrNanos(t.StartedAt), ptrNanos(t.EndedAt), t.Worker, logLocationArg(t.LogLocation), t.Snoozes, t.Message, t.MessageFor,
		ptrNanos(t.RateSlot),
		t.Lambda, t.ID, prev, string(old), t.Collection, t.Priority, nanos(t.CreatedAt)}
}

// updateArgs are updateSQL's arguments for t written over version prev, in status old.
func updateArgs(t task.Task, prev int64, old task.Status) []any {
	return []any{t.Collection, t.Priority, string(t.Status), blob(t.Result), t.Error,
		t.Attempts, t.MaxAttempts, nanos(t.RunAt), ptrNanos(t.Deadline), ptrNanos(t.NextTriggerAt),
		nanos(t.CreatedAt), nanos(t.UpdatedAt), t.Version, t.Lease, t.Spec, t.Parked,
		blob(t.Settled), t.Downstream, t.NotifyCursor, t.CancelRequested, ptrNanos(t.NotBefore), t.HandBacks,
		t.AttemptSeq, ptrNanos(t.StartedAt), ptrNanos(t.EndedAt), t.Worker, logLocationArg(t.LogLocation), t.Snoozes, t.Message, t.MessageFor,
		ptrNanos(t.RateSlot),
		t.Lambda, t.ID, prev, string(old)}
}

// Update writes t if the stored version is still prev. The check and the write are one
// statement, so of racing updates exactly one matches the row, also when both are in one group
// commit. It returns once the write is committed (synced), as a lone transaction would.
func (s *Store) Update(ctx context.Context, t task.Task, prev int64) error {
	return s.write(ctx, &update{t: t, prev: prev, done: make(chan error, 1)}, t)
}

// Redrive writes t like Update, and its payload with it, in one transaction (task.RedriveStore).
// SQLite keeps ended tasks and their payloads until they are deleted, so none is ever gone.
func (s *Store) Redrive(ctx context.Context, t task.Task, prev int64) error {
	return s.write(ctx, &update{t: t, prev: prev, payload: true, done: make(chan error, 1)}, t)
}

// Unsynced is a view of a Store whose Update does not wait for an fsync of its own: its writes
// are committed at once, so they survive a crash of the process, but the last of them may be
// lost to a power loss or a crash of the machine. Every other write, and every write of the
// Store itself, is synced as before, and syncs the unsynced writes committed before it (they are
// earlier in the same log): a write lost is always one of the last. A power loss thus takes the
// store back to an earlier state it was in, never to a state it was never in.
//
// The services that run tasks (the status controller, the consumer) write through it: their
// transitions, lost, leave a task as it was before them, waiting, enqueued or running, and the
// restart's recovery (consumer.Recover) runs it again. The API writes through the Store: a
// schedule, a cancel or a gate it acknowledged is synced (docs/guarantees.md).
type Unsynced struct{ *Store }

// Unsynced returns the view of s whose updates are not synced on their own.
func (s *Store) Unsynced() Unsynced { return Unsynced{s} }

// Update writes t if the stored version is still prev, as Store.Update, and returns once it is
// committed, without waiting for an fsync.
func (u Unsynced) Update(ctx context.Context, t task.Task, prev int64) error {
	return u.write(ctx, &update{t: t, prev: prev, unsynced: true, done: make(chan error, 1)}, t)
}

// UpdateMany writes each update like Update, all in one commit (task.BatchUpdater), synced.
func (s *Store) UpdateMany(ctx context.Context, ws []task.Versioned) []error {
	return s.updateMany(ctx, ws, false, false)
}

// UpdateMany writes each update like Update, all in one commit, not synced on its own.
func (u Unsynced) UpdateMany(ctx context.Context, ws []task.Versioned) []error {
	return u.updateMany(ctx, ws, true, false)
}

func (s *Store) updateMany(ctx context.Context, ws []task.Versioned, unsynced, volatile bool) []error {
	errs := make([]error, len(ws))
	if len(ws) == 0 {
		return errs
	}
	u := &update{many: ws, manyDone: errs, unsynced: unsynced, volatile: volatile, done: make(chan error, 1)}
	if err := s.write(ctx, u, ws[0].Task); err != nil {
		// Failed as a whole, or the caller stopped waiting: the writer may still fill errs.
		errs = make([]error, len(ws))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// write hands u to the group writer and waits for its outcome.
func (s *Store) write(ctx context.Context, u *update, t task.Task) error {
	select {
	case s.updates <- u:
	case <-s.closed:
		return fmt.Errorf("sqlitestore: write %s/%s: the store is closed", t.Lambda, t.ID)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-u.done:
		return storageError(err)
	case <-ctx.Done():
		// As with a statement cut short: the write may or may not be committed.
		return ctx.Err()
	}
}

// storageError turns SQLite's "database or disk is full" into task.ErrStorageFull: the write
// was rolled back, and may be retried once there is room. Other errors are left as they are.
func storageError(err error) error {
	var e *sqlite.Error
	if errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_FULL {
		return task.Errorf(task.ErrStorageFull, "the task store is full: its disk has no room left; retry later")
	}
	return err
}

// writeUpdates commits the updates waiting, together, until the store closes. It alone answers
// the updates, each exactly once.
func (s *Store) writeUpdates() {
	// Claims kept in memory past their time are written by the next group, or at a tick.
	tick := time.NewTicker(FlushAfter / 4)
	defer tick.Stop()
	for {
		var group []*update
		select {
		case u := <-s.updates:
			group = append(group, u)
		case <-tick.C:
			if len(s.dueToFlush(time.Now())) > 0 {
				// An error is the next group's: it flushes them again.
				_, _ = s.commitGroup(nil)
			}
			continue
		case <-s.closed:
			return
		}
	more: // whatever arrived while the last commit was syncing
		for len(group) < maxGroup {
			select {
			case u := <-s.updates:
				group = append(group, u)
			default:
				break more
			}
		}
		outcomes, err := s.commitGroup(group)
		if err == nil {
			for i, u := range group {
				u.done <- outcomes[i]
			}
			continue
		}
		// Something beyond a version mismatch failed: write each alone, so only the update at
		// fault fails.
		for _, u := range group {
			select {
			case <-s.closed:
				u.done <- fmt.Errorf("sqlitestore: the store closed before this write was retried alone: %w", err)
			default:
				u.done <- s.commitAlone(u)
			}
		}
	}
}

// commitAlone writes one update in a transaction of its own and returns its outcome.
func (s *Store) commitAlone(u *update) error {
	outcomes, err := s.commitGroup([]*update{u})
	if err != nil {
		return err
	}
	return outcomes[0]
}

// commitGroup writes the group in one transaction and returns the outcome of each update, or the
// error that failed the transaction. It answers none of them.
func (s *Store) commitGroup(group []*update) ([]error, error) {
	ctx := context.Background() // no caller's cancellation may abort the others' writes
	// The writer's connection, held for the group: the other writes on it (SetGate,
	// AddUpstreams) never see its synchronous setting changed.
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: update: %w", err)
	}
	defer conn.Close()
	// A group syncs its commit (synchronous=FULL, as the connection was opened) if any of its
	// writes asks for it. The log is written in order, so a synced commit syncs the unsynced ones
	// before it too. SQLite changes the setting only between transactions.
	if !slices.ContainsFunc(group, func(u *update) bool { return !u.unsynced }) {
		if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err != nil {
			return nil, fmt.Errorf("sqlitestore: update: %w", err)
		}
		defer func() {
			if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
				// The connection must not go on unsynced: it is dropped, and opened afresh,
				// synced, by its next user. The group's outcome stands.
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: update: %w", err)
	}
	defer tx.Rollback()
	defer s.memo.abort() // unless the commit kept its notes first
	stmt := updateStmts{tx: tx, state: tx.StmtContext(ctx, s.updateState), full: tx.StmtContext(ctx, s.update),
		record: tx.StmtContext(ctx, s.record), drop: tx.StmtContext(ctx, s.drop), readStatus: tx.StmtContext(ctx, s.readStatus),
		counts: tally{}, memo: s.memo}
	create := createStmts{insert: tx.StmtContext(ctx, s.insert), taken: tx.StmtContext(ctx, s.taken)}
	outcomes := make([]error, len(group))
	kept := staged{}
	if err := s.flushDue(ctx, stmt, kept, time.Now()); err != nil {
		return nil, err
	}
	write := func(u *update, t task.Task, prev int64) (outcome, err error) {
		return s.volatileUpdate(ctx, stmt, kept, t, prev, u.volatile)
	}
	for i, u := range group {
		if u.create != nil {
			var err error
			if outcomes[i], err = createIn(ctx, tx, create, u.create); err != nil {
				return nil, err
			}
			if outcomes[i] == nil {
				for _, t := range u.create {
					s.memo.note(t)
				}
			}
			continue
		}
		if u.many != nil {
			for j, w := range u.many {
				var err error
				if u.manyDone[j], err = write(u, w.Task, w.Prev); err != nil {
					return nil, err
				}
			}
			continue
		}
		var err error
		if outcomes[i], err = write(u, u.t, u.prev); err != nil {
			return nil, err
		}
		if outcomes[i] == nil && u.payload {
			t := u.t
			if _, err := tx.ExecContext(ctx, `UPDATE tasks SET payload = ? WHERE lambda = ? AND id = ?`, blob(t.Payload), t.Lambda, t.ID); err != nil {
				return nil, fmt.Errorf("sqlitestore: redrive %s/%s: %w", t.Lambda, t.ID, err)
			}
		}
	}
	// The moves' counts go last, once per count row: a hundred claims write two rows.
	if err := stmt.counts.write(ctx, tx.StmtContext(ctx, s.count)); err != nil {
		return nil, fmt.Errorf("sqlitestore: write: %w", err)
	}
	if len(kept) > 0 {
		s.vol.beginApply()
		defer s.vol.endApply()
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlitestore: write: %w", err)
	}
	s.memo.commit()
	if unjournaled := s.apply(kept); unjournaled != nil {
		failJournaled(group, outcomes, unjournaled)
	}
	return outcomes, nil
}

// updateStmts are the update statements of a group's transaction, the statements that record an
// ended attempt (task.Task.Ended) and drop the one it pushes out of the history, the one that
// reads a task's status, and the group's count moves and the store's memo of statuses.
type updateStmts struct {
	tx                                    *sql.Tx
	state, full, record, drop, readStatus *sql.Stmt
	counts                                tally
	memo                                  *statusMemo
}

// updateIn writes t over version prev, with updateStateSQL, or updateSQL if that matched no row,
// and counts its move from the status it replaces: the one the memo has for that version, else
// the one read. Its outcome is nil or task.ErrConflict, or a *task.Held from a start's limits
// (limitsIn); the error is one that fails the group.
func updateIn(ctx context.Context, stmts updateStmts, t task.Task, prev int64) (outcome, err error) {
	if len(t.Limits.Of(t)) > 0 {
		if outcome, err := limitsIn(ctx, stmts.tx, t, prev); outcome != nil || err != nil {
			return outcome, err
		}
	}
	fail := func(err error) (error, error) {
		return nil, fmt.Errorf("sqlitestore: update %s/%s: %w", t.Lambda, t.ID, err)
	}
	old, remembered := stmts.memo.status(t.Ref(), prev)
	if !remembered {
		var found bool
		if old, found, err = statusAt(ctx, stmts.readStatus, t, prev); err != nil {
			return fail(err)
		} else if !found {
			return conflict(t), nil
		}
	}
	n, err := execCount(ctx, stmts.state, updateStateArgs(t, prev, old)...)
	if err != nil {
		return fail(err)
	}
	if n == 0 {
		// t changes its collection, priority or creation time, which updateSQL writes; or the
		// memo was wrong (a write outside the group writer), or the version moved on.
		if remembered {
			var found bool
			if old, found, err = statusAt(ctx, stmts.readStatus, t, prev); err != nil {
				return fail(err)
			} else if !found {
				return conflict(t), nil
			}
		}
		if n, err = execCount(ctx, stmts.full, updateArgs(t, prev, old)...); err != nil {
			return fail(err)
		} else if n == 0 {
			return conflict(t), nil // not after a read in this transaction: nothing else writes in it
		}
	}
	stmts.counts.move(t.Lambda, old, t.Status)
	stmts.memo.note(t)
	return nil, recordAttempt(ctx, stmts, t)
}

// conflict is the outcome of an update over a version that is no longer stored.
func conflict(t task.Task) error {
	return task.Errorf(task.ErrConflict, "task %q of lambda %s changed meanwhile or is gone", t.ID, t.Lambda)
}

// statusAt reads t's stored status at version prev, with stmt (statusSQL); found is false if t is
// gone or at another version.
func statusAt(ctx context.Context, stmt *sql.Stmt, t task.Task, prev int64) (status task.Status, found bool, err error) {
	switch err := stmt.QueryRowContext(ctx, t.Lambda, t.ID, prev).Scan(&status); {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return status, true, nil
}

// execCount runs stmt and returns how many rows it changed.
func execCount(ctx context.Context, stmt *sql.Stmt, args ...any) (int64, error) {
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// createStmts are the statements of createIn in a transaction: insertSQL and takenSQL.
type createStmts struct{ insert, taken *sql.Stmt }

// createIn inserts a batch, with the upstreams of its tasks, inside the group's transaction. It
// first looks for the batch's ids among the tasks, those of the group's earlier writes included:
// a taken id writes nothing of the batch, and is its outcome (task.ErrExists). (A savepoint to
// undo a batch cost more: SQLite then copies every page the batch changes to its sub-journal.)
// The error is one that fails the group.
func createIn(ctx context.Context, tx *sql.Tx, stmts createStmts, tasks []task.Task) (outcome, err error) {
	if taken, err := takenID(ctx, stmts.taken, tasks); err != nil {
		return nil, fmt.Errorf("sqlitestore: create: %w", err)
	} else if taken != nil {
		return task.Errorf(task.ErrExists, "task %q of lambda %s already exists", taken.ID, taken.Lambda), nil
	}
	if buried, err := buriedNonce(ctx, tx, tasks); err != nil {
		return nil, fmt.Errorf("sqlitestore: create: %w", err)
	} else if buried != nil {
		return task.Errorf(task.ErrBuried, "task %q of lambda %s: its message was dropped before it was written; send another", buried.ID, buried.Lambda), nil
	}
	for _, t := range tasks {
		if n, err := execCount(ctx, stmts.insert, insertArgs(t)...); err != nil {
			return nil, fmt.Errorf("sqlitestore: create %s/%s: %w", t.Lambda, t.ID, err)
		} else if n == 0 {
			// takenID found it free in this very transaction: the group fails, as on any fault.
			return nil, fmt.Errorf("sqlitestore: create %s/%s: the id was taken after it was found free", t.Lambda, t.ID)
		}
		if len(t.After) > 0 {
			if err := insertUpstreams(ctx, tx, t.Ref(), 0, t.After); err != nil {
				return nil, fmt.Errorf("sqlitestore: create %s/%s: %w", t.Lambda, t.ID, err)
			}
		}
	}
	return nil, nil
}

// insertArgs are the arguments of insertSQL for t.
func insertArgs(t task.Task) []any {
	return []any{
		t.Lambda, t.ID, t.Collection, t.Priority, string(t.Status), blob(t.Payload), blob(t.Result),
		t.Error, t.Attempts, t.MaxAttempts, nanos(t.RunAt), ptrNanos(t.Deadline),
		ptrNanos(t.NextTriggerAt), nanos(t.CreatedAt), nanos(t.UpdatedAt), t.Version, t.Lease, t.Spec, t.Parked,
		len(t.After), t.Trigger, blob(t.Settled), t.Downstream, t.NotifyCursor, t.CancelRequested, ptrNanos(t.NotBefore), t.HandBacks,
		t.AttemptSeq, ptrNanos(t.StartedAt), ptrNanos(t.EndedAt), t.Worker, logLocationArg(t.LogLocation), t.Snoozes, t.Message, t.MessageFor,
		t.Key, ptrNanos(t.RateSlot),
	}
}

// takenSQL finds which of a JSON array of ids a lambda has: one statement whatever their number.
const takenSQL = `SELECT id FROM tasks WHERE lambda = ? AND id IN (SELECT value FROM json_each(?))`

// takenID returns the first task of tasks whose id its lambda has already, or nil: one query
// per lambda of the batch, with stmt (takenSQL).
func takenID(ctx context.Context, stmt *sql.Stmt, tasks []task.Task) (*task.Task, error) {
	byLambda := map[string][]string{}
	for _, t := range tasks {
		byLambda[t.Lambda] = append(byLambda[t.Lambda], t.ID)
	}
	taken := map[task.Ref]bool{}
	for lambda, ids := range byLambda {
		list, err := json.Marshal(ids)
		if err != nil {
			return nil, err
		}
		rows, err := stmt.QueryContext(ctx, lambda, string(list))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			taken[task.Ref{Lambda: lambda, ID: id}] = true
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
	}
	for i := range tasks {
		if taken[tasks[i].Ref()] {
			return &tasks[i], nil
		}
	}
	return nil, nil
}

// List returns a page of one lambda's tasks in creation order. The cursor is the position of
// the last task returned, so tasks created meanwhile neither shift nor repeat a page.
//
// No filter, or one, reads an index in order (tasks_by_created, tasks_by_status or
// tasks_by_collection) and stops at the page. Both filters read the status's range and check the
// collection of at most p.ReadBudget() entries (listBoth).
func (s *Store) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	tasks, cursor, err := s.listRows(ctx, p)
	if err != nil {
		return nil, "", err
	}
	// A claim kept in memory shows as it is; its row, still enqueued, may have matched a filter
	// by status that the claim no longer does.
	s.liveAll(tasks, nil)
	if set := p.StatusSet(); len(set) > 0 {
		tasks = slices.DeleteFunc(tasks, func(t task.Task) bool { return !slices.Contains(set, t.Status) })
	}
	return tasks, cursor, nil
}

// listRows is List from the rows alone.
func (s *Store) listRows(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	limit := p.PageSize()
	var after *position
	if p.Cursor != "" {
		created, id, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		after = &position{created, id}
	}
	switch set := p.StatusSet(); len(set) {
	case 0:
	case 1:
		p.Status, p.Statuses = set[0], nil
	default:
		return s.listStatuses(ctx, p, set)
	}
	if p.Status != "" && p.Collection != "" {
		return s.listBoth(ctx, p, after)
	}
	q := `SELECT ` + columns + ` FROM tasks WHERE lambda = ?`
	args := []any{p.Lambda}
	if p.Status != "" {
		q += ` AND status = ?`
		args = append(args, string(p.Status))
	}
	if p.Collection != "" {
		q += ` AND collection = ?`
		args = append(args, p.Collection)
	}
	q, args = createdRange(q, args, p)
	if after != nil {
		q += ` AND (created_at, id) > (?, ?)`
		args = append(args, after.created, after.id)
	}
	// One row more than the page tells whether another page follows.
	q += ` ORDER BY created_at, id LIMIT ?`
	args = append(args, limit+1)
	tasks, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlitestore: list %s: %w", p.Lambda, err)
	}
	if len(tasks) <= limit {
		return tasks, "", nil
	}
	tasks = tasks[:limit]
	last := tasks[limit-1]
	return tasks, encodeCursor(last.CreatedAt.UnixNano(), last.ID), nil
}

// position is where a task sits in a list: its creation time, then its id.
type position struct {
	created int64
	id      string
}

func (a position) before(b position) bool {
	return a.created < b.created || (a.created == b.created && a.id < b.id)
}

// createdRange adds p's bounds on the creation time to a list query: every index a list reads
// is ordered by created_at after its equalities, so the bounds narrow the range it reads.
func createdRange(q string, args []any, p task.ListParams) (string, []any) {
	if !p.CreatedFrom.IsZero() {
		q += ` AND created_at >= ?`
		args = append(args, nanos(p.CreatedFrom))
	}
	if !p.CreatedTo.IsZero() {
		q += ` AND created_at < ?`
		args = append(args, nanos(p.CreatedTo))
	}
	return q, args
}

// listStatuses answers a list filtered by several statuses: it lists a page of each status (so
// each reads tasks_by_status in order, within the page's budget) and merges them, as a store
// that shards its index merges its shards. The merge keeps the tasks up to the frontier, the
// smallest cursor of a status that has more: every status's page holds all its matches up to
// there, so none is skipped. The cursor is the last task of a full page, else the frontier.
func (s *Store) listStatuses(ctx context.Context, p task.ListParams, set []task.Status) ([]task.Task, string, error) {
	limit := p.PageSize()
	var all []task.Task
	var frontier *position
	for _, status := range set {
		one := p
		one.Status, one.Statuses = status, nil
		tasks, next, err := s.List(ctx, one)
		if err != nil {
			return nil, "", err
		}
		all = append(all, tasks...)
		if next != "" {
			created, id, err := decodeCursor(next)
			if err != nil {
				return nil, "", err
			}
			if pos := (position{created, id}); frontier == nil || pos.before(*frontier) {
				frontier = &pos
			}
		}
	}
	at := func(t task.Task) position { return position{t.CreatedAt.UnixNano(), t.ID} }
	slices.SortFunc(all, func(a, b task.Task) int {
		switch pa, pb := at(a), at(b); {
		case pa.before(pb):
			return -1
		case pb.before(pa):
			return 1
		}
		return 0
	})
	if frontier != nil {
		all = slices.DeleteFunc(all, func(t task.Task) bool { return frontier.before(at(t)) })
	}
	switch {
	case len(all) > limit:
		all = all[:limit]
		last := at(all[limit-1])
		return all, encodeCursor(last.created, last.id), nil
	case frontier != nil:
		return all, encodeCursor(frontier.created, frontier.id), nil
	}
	return all, "", nil
}

// listBoth answers a list filtered by status and collection. It reads the status's entries of
// tasks_by_status in order, at most p.ReadBudget() of them, and checks each one's collection,
// until one more than the page matches. The tasks that match are then read by key. The cursor is
// the last task returned of a full page, else the last entry read if the budget ran out: a page
// may then hold fewer tasks than its limit, or none.
func (s *Store) listBoth(ctx context.Context, p task.ListParams, after *position) ([]task.Task, string, error) {
	limit := p.PageSize()
	q := `SELECT created_at, id, collection = ? FROM tasks WHERE lambda = ? AND status = ?`
	args := []any{p.Collection, p.Lambda, string(p.Status)}
	q, args = createdRange(q, args, p)
	if after != nil {
		q += ` AND (created_at, id) > (?, ?)`
		args = append(args, after.created, after.id)
	}
	q += ` ORDER BY created_at, id LIMIT ?`
	args = append(args, p.ReadBudget())
	if s.traced != nil {
		s.traced(q, args)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlitestore: list %s: %w", p.Lambda, err)
	}
	var matched []position
	var last position
	read := 0
	for len(matched) <= limit && rows.Next() {
		var match bool
		if err := rows.Scan(&last.created, &last.id, &match); err != nil {
			rows.Close()
			return nil, "", fmt.Errorf("sqlitestore: list %s: %w", p.Lambda, err)
		}
		read++
		if match {
			matched = append(matched, last)
		}
	}
	err = errors.Join(rows.Err(), rows.Close())
	if err != nil {
		return nil, "", fmt.Errorf("sqlitestore: list %s: %w", p.Lambda, err)
	}
	next := ""
	switch {
	case len(matched) > limit:
		matched = matched[:limit]
		next = encodeCursor(matched[limit-1].created, matched[limit-1].id)
	case read == p.ReadBudget():
		next = encodeCursor(last.created, last.id)
	}
	if len(matched) == 0 {
		return nil, next, nil
	}
	ids := make([]any, 0, len(matched)+1)
	ids = append(ids, p.Lambda)
	for _, m := range matched {
		ids = append(ids, m.id)
	}
	found, err := s.query(ctx, `SELECT `+columns+` FROM tasks WHERE lambda = ? AND id IN (`+placeholders(len(matched))+`)`, ids...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlitestore: list %s: %w", p.Lambda, err)
	}
	byID := make(map[string]task.Task, len(found))
	for _, t := range found {
		byID[t.ID] = t
	}
	tasks := make([]task.Task, 0, len(matched))
	for _, m := range matched {
		// A task that changed between the two reads is left out, as one that changed just before.
		if t, ok := byID[m.id]; ok && t.Status == p.Status && t.Collection == p.Collection {
			tasks = append(tasks, t)
		}
	}
	return tasks, next, nil
}

// Due returns tasks of one lambda whose next trigger has come, earliest first. No statuses
// means any status; a limit of zero means no limit. Parked tasks are asked for apart: among them
// each collection is its own index range (see dueParked).
//
// A query within one lane (running statuses only, enqueued only, pending only, ended only, or
// the other waiting statuses of one priority: every query of the consumer) reads that lane of
// tasks_due_lane in order and stops at its limit. A query of several lanes, each known (waiting
// statuses with a priority), reads each lane so and merges them (dueLanes). Any other reads and
// sorts the lambda's whole due range.
func (s *Store) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	if p.Parked && p.Collection == "" {
		return s.dueParked(ctx, p)
	}
	if lanes := dueLanes(p); !p.Parked && len(lanes) > 1 {
		return s.dueEachLane(ctx, p, lanes)
	}
	// Without the payload (task.Store.Due): a sweep reads many tasks and writes none of it.
	q := `SELECT ` + stateColumns + ` FROM tasks
		WHERE lambda = ? AND next_trigger_at IS NOT NULL AND next_trigger_at <= ?`
	args := []any{p.Lambda, p.Before.UnixNano()}
	switch lane, ok := dueLane(p); {
	case p.Parked:
		q += ` AND parked = 1` // a literal, so that SQLite can use the partial index
	case ok: // the lane holds no parked task
		q += ` AND ` + laneSQL + ` = ?`
		args = append(args, lane)
	default:
		q += ` AND parked = 0`
	}
	if len(p.Statuses) > 0 {
		q += ` AND status IN (` + placeholders(len(p.Statuses)) + `)`
		for _, st := range p.Statuses {
			args = append(args, string(st))
		}
	}
	if p.Priority != "" {
		q += ` AND priority = ?`
		args = append(args, p.Priority)
	}
	if p.Collection != "" {
		q += ` AND collection = ?`
		args = append(args, p.Collection)
	}
	if len(p.SkipCollections) > 0 {
		q += ` AND collection NOT IN (` + placeholders(len(p.SkipCollections)) + `)`
		for _, c := range p.SkipCollections {
			args = append(args, c)
		}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite reads a negative limit as none
	}
	q += ` ORDER BY next_trigger_at, id LIMIT ?`
	args = append(args, limit)
	tasks, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: due %s: %w", p.Lambda, err)
	}
	return tasks, nil
}

// dueLane returns the one lane (see laneSQL) that holds every task p selects, if there is one.
func dueLane(p task.DueParams) (string, bool) {
	if lanes := dueLanes(p); len(lanes) == 1 {
		return laneOf(lanes[0][0], p.Priority), true
	}
	return "", false
}

// dueLanes splits p's statuses by lane, if each status's lane is known: the waiting lanes are
// one per priority.
func dueLanes(p task.DueParams) [][]task.Status {
	statuses := p.Statuses
	if len(statuses) == 0 {
		statuses = task.Statuses
	}
	var lanes []string
	byLane := map[string][]task.Status{}
	for _, st := range statuses {
		lane := laneOf(st, p.Priority)
		if strings.HasPrefix(lane, "w#") && p.Priority == "" {
			return nil
		}
		if _, ok := byLane[lane]; !ok {
			lanes = append(lanes, lane)
		}
		byLane[lane] = append(byLane[lane], st)
	}
	out := make([][]task.Status, len(lanes))
	for i, lane := range lanes {
		out[i] = byLane[lane]
	}
	return out
}

// dueEachLane reads the due tasks of each lane's statuses, up to p's limit each, and returns the
// earliest of them: a read of each lane in order, never of the whole due range.
func (s *Store) dueEachLane(ctx context.Context, p task.DueParams, lanes [][]task.Status) ([]task.Task, error) {
	var out []task.Task
	for _, statuses := range lanes {
		one := p
		one.Statuses = statuses
		tasks, err := s.Due(ctx, one)
		if err != nil {
			return nil, err
		}
		out = append(out, tasks...)
	}
	slices.SortFunc(out, func(a, b task.Task) int {
		return cmp.Or(a.NextTriggerAt.Compare(*b.NextTriggerAt), strings.Compare(a.ID, b.ID))
	})
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// nextParkedSQL finds the first collection after one that has parked tasks: one index seek.
const nextParkedSQL = `SELECT collection FROM tasks WHERE lambda = ? AND parked = 1 AND collection > ?
	ORDER BY collection LIMIT 1`

// dueParked reads the parked tasks of every collection but those in p.SkipCollections, one
// collection at a time: an index seek finds the next collection, so a held backlog costs one
// seek, never a scan of its rows.
func (s *Store) dueParked(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	var out []task.Task
	for after := ""; p.Limit <= 0 || len(out) < p.Limit; {
		var coll string
		err := s.r.QueryRowContext(ctx, nextParkedSQL, p.Lambda, after).Scan(&coll)
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: due %s: %w", p.Lambda, err)
		}
		after = coll
		if slices.Contains(p.SkipCollections, coll) {
			continue
		}
		one := p
		one.Collection, one.SkipCollections = coll, nil
		if p.Limit > 0 {
			one.Limit = p.Limit - len(out)
		}
		tasks, err := s.Due(ctx, one)
		if err != nil {
			return nil, err
		}
		out = append(out, tasks...)
	}
	slices.SortFunc(out, func(a, b task.Task) int {
		return cmp.Or(a.NextTriggerAt.Compare(*b.NextTriggerAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Triggered looks for one row of the lambda in the sweep's index (tasks_due_lane), which holds
// exactly the tasks with a next trigger.
func (s *Store) Triggered(ctx context.Context, lambda string) (bool, error) {
	var found bool
	err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE lambda = ? AND next_trigger_at IS NOT NULL)`, lambda).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("sqlitestore: triggered %s: %w", lambda, err)
	}
	return found, nil
}

// Counts returns how many tasks of the lambda are in each status, from the counts the writes
// keep: one row per status.
func (s *Store) Counts(ctx context.Context, lambda string) (counts map[task.Status]int, err error) {
	// The rows and the entries as of one point: a commit between the two reads would count a
	// task twice (its row moved, its entry not yet dropped).
	err = s.vol.steady(func() (err error) {
		if counts, err = s.countRows(ctx, lambda); err == nil {
			s.liveCounts(lambda, counts)
		}
		return err
	})
	return counts, err
}

// countRows reads the lambda's count rows.
func (s *Store) countRows(ctx context.Context, lambda string) (map[task.Status]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT status, n FROM task_counts WHERE lambda = ? AND n > 0`, lambda)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: counts %s: %w", lambda, err)
	}
	defer rows.Close()
	counts := map[task.Status]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("sqlitestore: counts %s: %w", lambda, err)
		}
		counts[task.Status(st)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: counts %s: %w", lambda, err)
	}
	return counts, nil
}

// SetGate sets a gate, replacing the one on the same (lambda, collection); open removes it.
func (s *Store) SetGate(ctx context.Context, g task.Gate) error {
	var err error
	if g.Mode == task.GateOpen {
		_, err = s.w.ExecContext(ctx, `DELETE FROM gates WHERE lambda = ? AND collection = ?`, g.Lambda, g.Collection)
	} else {
		_, err = s.w.ExecContext(ctx, `INSERT INTO gates (lambda, collection, mode, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (lambda, collection) DO UPDATE SET mode = excluded.mode, updated_at = excluded.updated_at`,
			g.Lambda, g.Collection, g.Mode, nanos(g.UpdatedAt))
	}
	if err != nil {
		return storageError(fmt.Errorf("sqlitestore: set gate %s/%s: %w", g.Lambda, g.Collection, err))
	}
	return nil
}

// Gates returns every gate that is not open, by lambda and collection.
func (s *Store) Gates(ctx context.Context) ([]task.Gate, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT lambda, collection, mode, updated_at FROM gates ORDER BY lambda, collection`)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: gates: %w", err)
	}
	defer rows.Close()
	var gates []task.Gate
	for rows.Next() {
		var g task.Gate
		var updated sql.NullInt64
		if err := rows.Scan(&g.Lambda, &g.Collection, &g.Mode, &updated); err != nil {
			return nil, fmt.Errorf("sqlitestore: gates: %w", err)
		}
		g.UpdatedAt = fromNanos(updated)
		gates = append(gates, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: gates: %w", err)
	}
	return gates, nil
}

func (s *Store) query(ctx context.Context, q string, args ...any) ([]task.Task, error) {
	if s.traced != nil {
		s.traced(q, args)
	}
	if stmt := s.prepared(q); stmt != nil {
		return scanTasks(stmt.QueryContext(ctx, args...))
	}
	return scanTasks(s.r.QueryContext(ctx, q, args...))
}

// maxQueries bounds the statements prepared for lists and sweeps. Their SQL is made of the
// filters and lanes asked for, a few dozen shapes; the bound holds if a caller makes more.
const maxQueries = 256

// prepared returns q prepared on the readers, once (parsing a sweep's SQL cost about as much as
// running it), or nil past maxQueries statements, or if q does not prepare: then it runs as it is.
func (s *Store) prepared(q string) *sql.Stmt {
	if st, ok := s.queries.Load(q); ok {
		return st.(*sql.Stmt)
	}
	if s.queryCount.Add(1) > maxQueries {
		s.queryCount.Add(-1)
		return nil
	}
	st, err := s.r.Prepare(q)
	if err != nil {
		s.queryCount.Add(-1)
		return nil
	}
	if prev, loaded := s.queries.LoadOrStore(q, st); loaded {
		s.queryCount.Add(-1)
		_ = st.Close()
		return prev.(*sql.Stmt)
	}
	return st
}

// closeQueries closes the statements prepared.
func (s *Store) closeQueries() error {
	var errs []error
	s.queries.Range(func(_, st any) bool {
		errs = append(errs, st.(*sql.Stmt).Close())
		return true
	})
	return errors.Join(errs...)
}

// scanTasks reads every task of rows, the answer of a query that failed with err or not.
func scanTasks(rows *sql.Rows, err error) ([]task.Task, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tasks []task.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	return tasks, rows.Err()
}

func scanTask(row interface{ Scan(...any) error }) (task.Task, error) {
	var t task.Task
	var status string
	var payload, result, settled []byte
	var runAt, deadline, trigger, created, updated, notBefore, started, ended, rateSlot sql.NullInt64
	var logs sql.NullString
	err := row.Scan(&t.Lambda, &t.ID, &t.Collection, &t.Priority, &status, &payload, &result,
		&t.Error, &t.Attempts, &t.MaxAttempts, &runAt, &deadline, &trigger, &created, &updated,
		&t.Version, &t.Lease, &t.Spec, &t.Parked,
		&t.AfterCount, &t.Trigger, &settled, &t.Downstream, &t.NotifyCursor, &t.CancelRequested, &notBefore, &t.HandBacks,
		&t.AttemptSeq, &started, &ended, &t.Worker, &logs, &t.Snoozes, &t.Message, &t.MessageFor, &t.Key, &rateSlot)
	if err != nil {
		return task.Task{}, err
	}
	t.Status, t.Payload, t.Result, t.Settled = task.Status(status), payload, result, settled
	t.RunAt, t.CreatedAt, t.UpdatedAt = fromNanos(runAt), fromNanos(created), fromNanos(updated)
	t.Deadline, t.NextTriggerAt, t.NotBefore = ptrFromNanos(deadline), ptrFromNanos(trigger), ptrFromNanos(notBefore)
	t.StartedAt, t.EndedAt, t.RateSlot = ptrFromNanos(started), ptrFromNanos(ended), ptrFromNanos(rateSlot)
	if t.LogLocation, err = scanLogLocation(logs); err != nil {
		return task.Task{}, err
	}
	return t, nil
}

// blob keeps a nil payload NULL rather than an empty blob.
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

func nanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func ptrNanos(t *time.Time) any {
	if t == nil {
		return nil
	}
	return nanos(*t)
}

func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

func ptrFromNanos(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNanos(n)
	return &t
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// The cursor is "<created_at nanos>.<id>" in base64url: opaque to callers, cheap to check here.
func encodeCursor(created int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(created, 10) + "." + id))
}

func decodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		created, id, ok := strings.Cut(string(b), ".")
		if n, perr := strconv.ParseInt(created, 10, 64); ok && perr == nil && id != "" {
			return n, id, nil
		}
	}
	return 0, "", task.Errorf(task.ErrInvalid, "cursor %q is not one this store returned", task.Echo(c))
}

// migrate brings a database file written by an earlier version up to the schema: it adds the
// columns of later versions (parked, the flow fields, cancel_requested, hand_backs, the latest
// attempt's, the attempts' log, snoozes, queue_message and its lease, task_key, rate_slot), and the counts table filled from the tasks, before the schema's indexes and
// triggers need them, and drops a due lanes' index of other lanes, which the schema makes anew. In one transaction, so a crash leaves the file as it was.
func migrate(w *sql.DB) error {
	tx, err := w.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	has := func(q string, args ...any) (bool, error) {
		var n int
		err := tx.QueryRow(q, args...).Scan(&n)
		return n > 0, err
	}
	tasks, err := has(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'tasks'`)
	if err != nil || !tasks {
		return err // a new file: the schema creates everything
	}
	for _, c := range []struct{ name, def string }{
		{"parked", "INTEGER NOT NULL DEFAULT 0"},
		{"after_count", "INTEGER NOT NULL DEFAULT 0"},
		{"trigger_rule", "TEXT NOT NULL DEFAULT ''"},
		{"settled", "BLOB"},
		{"downstream", "INTEGER NOT NULL DEFAULT 0"},
		{"notify_cursor", "TEXT NOT NULL DEFAULT ''"},
		{"cancel_requested", "INTEGER NOT NULL DEFAULT 0"},
		{"not_before", "INTEGER"},
		{"hand_backs", "INTEGER NOT NULL DEFAULT 0"},
		{"attempt_seq", "INTEGER NOT NULL DEFAULT 0"},
		{"started_at", "INTEGER"},
		{"ended_at", "INTEGER"},
		{"worker", "TEXT NOT NULL DEFAULT ''"},
		{"log_location", "TEXT"},
		{"snoozes", "INTEGER NOT NULL DEFAULT 0"},
		{"queue_message", "TEXT NOT NULL DEFAULT ''"},
		{"queue_message_for", "TEXT NOT NULL DEFAULT ''"},
		{"task_key", "TEXT NOT NULL DEFAULT ''"},
		{"rate_slot", "INTEGER"},
	} {
		if present, err := has(`SELECT COUNT(*) FROM pragma_table_info('tasks') WHERE name = ?`, c.name); err != nil {
			return err
		} else if !present {
			if _, err := tx.Exec(`ALTER TABLE tasks ADD COLUMN ` + c.name + ` ` + c.def); err != nil {
				return fmt.Errorf("add column %s: %w", c.name, err)
			}
		}
	}
	// The attempts' logs came after their history: a file without attempts gets them whole.
	histories, err := has(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'attempts'`)
	if err != nil {
		return err
	}
	for _, c := range []struct{ name, def string }{
		{"log", "TEXT NOT NULL DEFAULT ''"},
		{"log_location", "TEXT"},
	} {
		if !histories {
			break
		}
		if present, err := has(`SELECT COUNT(*) FROM pragma_table_info('attempts') WHERE name = ?`, c.name); err != nil {
			return err
		} else if !present {
			if _, err := tx.Exec(`ALTER TABLE attempts ADD COLUMN ` + c.name + ` ` + c.def); err != nil {
				return fmt.Errorf("add column %s to attempts: %w", c.name, err)
			}
		}
	}
	// tasks_due_lane indexes the lanes of laneSQL. One made with other lanes (before enqueued tasks
	// had one of their own, or pending and ended tasks theirs) is dropped here, and the schema
	// makes it again.
	var laneIndex sql.NullString
	switch err := tx.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'tasks_due_lane'`).Scan(&laneIndex); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	case !strings.Contains(laneIndex.String, laneSQL):
		if _, err := tx.Exec(`DROP INDEX tasks_due_lane`); err != nil {
			return fmt.Errorf("drop the due lanes' index of before: %w", err)
		}
	}
	if counted, err := has(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'task_counts'`); err != nil {
		return err
	} else if !counted {
		if _, err := tx.Exec(`CREATE TABLE task_counts (lambda TEXT NOT NULL, status TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (lambda, status))`); err != nil {
			return fmt.Errorf("count tasks: %w", err)
		}
		if err := recount(tx); err != nil { // counts.go
			return err
		}
	}
	return tx.Commit()
}
