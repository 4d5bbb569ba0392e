package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Retention of finished tasks, as DynamoDB's TTL on dynamostore: a finished task stays readable
// for the retention after its last write, then a pruning job deletes it with its upstreams (its
// deps rows as a downstream). The job deletes a bounded number of tasks per transaction, so the
// writer is never held for long, and it only ever deletes tasks that are finished and have no
// trigger: a finished task whose downstreams are still to be told keeps its trigger (see
// task.MarkDownstream and task.Notified) and stays until they are told. A downstream that reads
// an upstream pruned meanwhile finds it gone, as on DynamoDB (task.InputGone).

// DefaultRetention is how long a finished task stays before it is pruned: dynamostore's default.
const DefaultRetention = 30 * 24 * time.Hour

// Defaults of the pruning job.
const (
	// DefaultPruneInterval is how often the job looks for expired tasks when it found few.
	DefaultPruneInterval = time.Minute
	// DefaultPruneBatch bounds the tasks one pass deletes, in one transaction.
	DefaultPruneBatch = 500
	// prunePause is the pause between two full passes: the writer's other transactions go in
	// between, and a backlog of expired tasks is worked off at a bounded rate.
	prunePause = 50 * time.Millisecond
)

// Options configure a store opened with OpenWith.
type Options struct {
	// Retention is how long a finished task stays after its last write before the pruning job
	// deletes it. Zero or less keeps every task: no job runs.
	Retention time.Duration
	// PruneInterval is how often the job runs a pass (DefaultPruneInterval if zero); passes that
	// find a full batch follow one another at a short pause instead.
	PruneInterval time.Duration
	// PruneBatch bounds the tasks one pass deletes (DefaultPruneBatch if zero).
	PruneBatch int
	// Now is the job's clock (time.Now if nil).
	Now func() time.Time
	// Logger, if set, hears of a pass that failed.
	Logger interface {
		Warn(msg string, args ...any)
	}
}

// prunableSQL is what makes a task prunable, the condition of tasks_expiry: finished (the
// statuses of task.Ended, TestPrunableStatuses checks), and no trigger (no downstreams left to
// tell). Queries must repeat it as it is for SQLite to use the index.
const prunableSQL = `next_trigger_at IS NULL AND status IN ('success', 'fatal_failure', 'dead', 'cancelled', 'dropped', 'upstream_failed')`

// expirySchema indexes the prunable tasks by their last write, so a pass reads the oldest first
// and stops at its batch. Only finished tasks have an entry, written by the transition that ends
// a task (or tells its last downstream), at the index's end: updated_at only grows.
const expirySchema = `CREATE INDEX IF NOT EXISTS tasks_expiry ON tasks (updated_at) WHERE ` + prunableSQL + `;`

// expiredSQL picks a pass's tasks: the oldest prunable ones written before a time.
const expiredSQL = `SELECT lambda, id, status, after_count FROM tasks WHERE ` + prunableSQL + ` AND updated_at < ?
	ORDER BY updated_at LIMIT ?`

// migrateExpiry makes tasks_expiry, after dropping one made with other finished statuses.
func migrateExpiry(w *sql.DB) error {
	var def string
	err := w.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'tasks_expiry'`).Scan(&def)
	if err == nil && !strings.Contains(def, prunableSQL) {
		_, err = w.Exec(`DROP INDEX tasks_expiry`)
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	_, err = w.Exec(expirySchema)
	return err
}

// OpenWith opens the database file at path as Open does, and starts the pruning job if
// o.Retention is set. Close stops it.
func OpenWith(path string, o Options) (*Store, error) {
	s, err := Open(path)
	if err != nil {
		return nil, err
	}
	if o.Retention > 0 {
		s.startPruning(o)
	}
	return s, nil
}

// startPruning runs the pruning job until the store closes.
func (s *Store) startPruning(o Options) {
	if o.PruneInterval <= 0 {
		o.PruneInterval = DefaultPruneInterval
	}
	if o.PruneBatch <= 0 {
		o.PruneBatch = DefaultPruneBatch
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s.pruner.Go(func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-s.closed
			cancel()
		}()
		wait := time.Duration(0) // a first pass at once: a file reopened after a while has a backlog
		for {
			select {
			case <-s.closed:
				return
			case <-time.After(wait):
			}
			n, err := s.Prune(ctx, o.Now().Add(-o.Retention), o.PruneBatch)
			switch {
			case err != nil && ctx.Err() == nil && o.Logger != nil:
				o.Logger.Warn("sqlitestore: pruning finished tasks failed; retrying later", "err", err)
			case err == nil && n == o.PruneBatch:
				wait = prunePause
				continue
			}
			wait = o.PruneInterval
		}
	})
}

// Prune deletes at most limit finished tasks whose last write was before cutoff and that have no
// downstreams left to tell, oldest first, with their upstreams' rows, in one transaction. It
// returns how many it deleted. A task it deletes is gone for every reader, and for a downstream
// that names it (task.Settled.Gone); the counts lose it too, in the same transaction.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("sqlitestore: prune: limit must be at least 1, got %d", limit)
	}
	n, err := s.prune(ctx, cutoff.UnixNano(), limit)
	if err != nil {
		return 0, storageError(fmt.Errorf("sqlitestore: prune: %w", err))
	}
	return n, nil
}

func (s *Store) prune(ctx context.Context, cutoff int64, limit int) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	// Tombstones outlive their life (task.TombstoneLife) by the retention: nothing reads them.
	if _, err := tx.ExecContext(ctx, `DELETE FROM tombstones WHERE expires_at < ?`, cutoff); err != nil {
		return 0, err
	}
	if s.traced != nil {
		s.traced(expiredSQL, []any{cutoff, limit})
	}
	rows, err := tx.QueryContext(ctx, expiredSQL, cutoff, limit)
	if err != nil {
		return 0, err
	}
	type expired struct {
		lambda, id string
		status     task.Status
		after      int
	}
	var batch []expired
	for rows.Next() {
		var e expired
		if err := rows.Scan(&e.lambda, &e.id, &e.status, &e.after); err != nil {
			rows.Close()
			return 0, err
		}
		batch = append(batch, e)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, err
	}
	if len(batch) == 0 {
		return 0, tx.Commit()
	}
	delTask, err := tx.PrepareContext(ctx, deleteExpiredSQL)
	if err != nil {
		return 0, err
	}
	defer delTask.Close()
	delDeps, err := tx.PrepareContext(ctx, deleteUpstreamsSQL)
	if err != nil {
		return 0, err
	}
	defer delDeps.Close()
	counts := tally{}
	for _, e := range batch {
		if n, err := execCount(ctx, delTask, e.lambda, e.id); err != nil {
			return 0, err
		} else if n > 0 {
			counts.add(e.lambda, e.status, -1)
		}
		if e.after > 0 {
			if _, err := delDeps.ExecContext(ctx, e.lambda, e.id); err != nil {
				return 0, err
			}
		}
	}
	if err := counts.write(ctx, tx.StmtContext(ctx, s.count)); err != nil {
		return 0, err
	}
	return len(batch), tx.Commit()
}

// deleteExpiredSQL deletes one task picked by expiredSQL. The transaction holds the writer, so
// nothing changed it since it was picked; the condition is repeated all the same.
const deleteExpiredSQL = `DELETE FROM tasks WHERE lambda = ? AND id = ? AND ` + prunableSQL

// deleteUpstreamsSQL deletes a pruned task's upstreams. The rows that name it as an upstream are
// its downstreams' After and stay: a downstream reads it as gone.
const deleteUpstreamsSQL = `DELETE FROM deps WHERE down_lambda = ? AND down_id = ?`
