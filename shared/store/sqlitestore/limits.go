package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/openatf/atf/shared/task"
)

// limitsSchema keeps the limits of starts (task.Limits). A scope is '*', the whole lambda, or
// 'k:' and a task's key. limit_holders has one row per task holding a place under a concurrency
// cap, with the lease it started under: a row whose task no longer runs under that lease is
// stale, and the next start takes its place, so no task's end writes here. limit_rates has the
// time the next start under a rate is due. Only the starts of limited lambdas touch them.
const limitsSchema = `
CREATE TABLE IF NOT EXISTS limit_holders (
	lambda  TEXT NOT NULL,
	scope   TEXT NOT NULL,
	task_id TEXT NOT NULL,
	lease   TEXT NOT NULL,
	PRIMARY KEY (lambda, scope, task_id)
);

CREATE TABLE IF NOT EXISTS limit_rates (
	lambda  TEXT    NOT NULL,
	scope   TEXT    NOT NULL,
	next_at INTEGER NOT NULL,
	PRIMARY KEY (lambda, scope)
);`

// scopeOf is the scope of a limit in the tables: '*' for the whole lambda, 'k:' and the key.
func scopeOf(l task.Limit) string {
	if l.Key == "" {
		return "*"
	}
	return "k:" + l.Key
}

// holdersSQL reads a scope's holders, each with its task's status and lease (NULL if gone).
const holdersSQL = `SELECT h.task_id, h.lease, t.status, t.lease FROM limit_holders h
	LEFT JOIN tasks t ON t.lambda = h.lambda AND t.id = h.task_id
	WHERE h.lambda = ? AND h.scope = ?`

// limitsIn takes t's places under its limits inside the group's transaction, before updateIn
// writes t: the single writer makes the check and the writes atomic. If a limit holds the start,
// its outcome is a *task.Held and nothing is written; if t's version moved on, task.ErrConflict,
// which wins over a limit. The error is one that fails the group.
func limitsIn(ctx context.Context, tx *sql.Tx, t task.Task, prev int64) (outcome, err error) {
	var version int64
	err = tx.QueryRowContext(ctx, `SELECT version FROM tasks WHERE lambda = ? AND id = ?`, t.Lambda, t.ID).Scan(&version)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlitestore: update %s/%s: %w", t.Lambda, t.ID, err)
	}
	if err != nil || version != prev {
		return task.Errorf(task.ErrConflict, "task %q of lambda %s changed meanwhile or is gone", t.ID, t.Lambda), nil
	}
	now := t.StartTime()
	limits := t.Limits.Of(t)
	// stale[i] are the rows of limits[i] to drop for t's own: those of tasks that no longer run
	// under the lease they hold them for, and t's own of an earlier attempt.
	stale := make([][]string, len(limits))
	for i, l := range limits {
		if l.Cap > 0 {
			live, dead, err := holders(ctx, tx, t, scopeOf(l))
			if err != nil {
				return nil, fmt.Errorf("sqlitestore: update %s/%s: read the %s: %w", t.Lambda, t.ID, l.Name, err)
			}
			if live >= l.Cap {
				return &task.Held{Limit: l.Name}, nil
			}
			stale[i] = dead
			continue
		}
		var next sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT next_at FROM limit_rates WHERE lambda = ? AND scope = ?`, t.Lambda, scopeOf(l)).Scan(&next)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("sqlitestore: update %s/%s: read the %s: %w", t.Lambda, t.ID, l.Name, err)
		}
		if until := fromNanos(next); next.Valid && until.After(now) {
			return &task.Held{Limit: l.Name, Until: until}, nil
		}
	}
	for i, l := range limits {
		var err error
		if l.Cap > 0 {
			err = takePlace(ctx, tx, t, scopeOf(l), stale[i])
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO limit_rates (lambda, scope, next_at) VALUES (?, ?, ?)
				ON CONFLICT (lambda, scope) DO UPDATE SET next_at = excluded.next_at`,
				t.Lambda, scopeOf(l), nanos(now.Add(l.Rate.Interval())))
		}
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: update %s/%s: take its place under the %s: %w", t.Lambda, t.ID, l.Name, err)
		}
	}
	return nil, nil
}

// holders counts the tasks other than t that hold a place in scope and still run under the lease
// they hold it for, and lists the other rows (t's own included).
func holders(ctx context.Context, tx *sql.Tx, t task.Task, scope string) (live int, stale []string, err error) {
	rows, err := tx.QueryContext(ctx, holdersSQL, t.Lambda, scope)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, lease string
		var status, running sql.NullString
		if err := rows.Scan(&id, &lease, &status, &running); err != nil {
			return 0, nil, err
		}
		if id != t.ID && slices.Contains(task.Running, task.Status(status.String)) && running.String == lease {
			live++
		} else {
			stale = append(stale, id)
		}
	}
	return live, stale, rows.Err()
}

// takePlace drops the stale rows of scope and writes t's with its lease: the scope keeps no more
// rows than its cap.
func takePlace(ctx context.Context, tx *sql.Tx, t task.Task, scope string, stale []string) error {
	for _, id := range stale {
		if _, err := tx.ExecContext(ctx, `DELETE FROM limit_holders WHERE lambda = ? AND scope = ? AND task_id = ?`, t.Lambda, scope, id); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO limit_holders (lambda, scope, task_id, lease) VALUES (?, ?, ?, ?)`, t.Lambda, scope, t.ID, t.Lease)
	return err
}
