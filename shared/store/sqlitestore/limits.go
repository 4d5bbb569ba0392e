package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

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
// its outcome is a *task.Held and the task stays as it was, but for a rate's booking: a start
// that a rate holds books its slot (task.RateHold), writing the rates' records and the slot on
// the task, its version moved on. A start on its booking (task.BookingAt) takes no rate's turn.
// If t's version moved on, task.ErrConflict, which wins over a limit. The error is one that
// fails the group.
func limitsIn(ctx context.Context, tx *sql.Tx, t task.Task, prev int64) (outcome, err error) {
	var version int64
	var slot sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT version, rate_slot FROM tasks WHERE lambda = ? AND id = ?`, t.Lambda, t.ID).Scan(&version, &slot)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlitestore: update %s/%s: %w", t.Lambda, t.ID, err)
	}
	if err != nil || version != prev {
		return task.Errorf(task.ErrConflict, "task %q of lambda %s changed meanwhile or is gone", t.ID, t.Lambda), nil
	}
	now := t.StartTime()
	var caps, rates []task.Limit
	for _, l := range t.Limits.Of(t) {
		if l.Cap > 0 {
			caps = append(caps, l)
		} else {
			rates = append(rates, l)
		}
	}
	booked := ptrFromNanos(slot)
	if len(rates) > 0 && task.BookingAt(booked, now) == task.BookedLater {
		// Before the caps: a task booked ahead waits for its slot, not for a cap's place.
		return &task.Held{Limit: task.RateName(rates), Until: *booked}, nil
	}
	// stale[i] are the rows of caps[i] to drop for t's own: those of tasks that no longer run
	// under the lease they hold them for, and t's own of an earlier attempt.
	stale := make([][]string, len(caps))
	for i, l := range caps {
		live, dead, err := holders(ctx, tx, t, scopeOf(l))
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: update %s/%s: read the %s: %w", t.Lambda, t.ID, l.Name, err)
		}
		if live >= l.Cap {
			return &task.Held{Limit: l.Name}, nil // a cap books nothing
		}
		stale[i] = dead
	}
	if len(rates) > 0 {
		switch task.BookingAt(booked, now) {
		case task.BookedNow:
			rates = nil // its turn was taken when it booked
		default:
			if held, err := rateHold(ctx, tx, t, prev, rates, now); held != nil || err != nil {
				return held, err
			}
		}
	}
	for i, l := range caps {
		if err := takePlace(ctx, tx, t, scopeOf(l), stale[i]); err != nil {
			return nil, fmt.Errorf("sqlitestore: update %s/%s: take its place under the %s: %w", t.Lambda, t.ID, l.Name, err)
		}
	}
	for _, l := range rates {
		if err := setNextStart(ctx, tx, t.Lambda, l, now.Add(l.Rate.Interval())); err != nil {
			return nil, fmt.Errorf("sqlitestore: update %s/%s: take its turn under the %s: %w", t.Lambda, t.ID, l.Name, err)
		}
	}
	return nil, nil
}

// rateHold reads the next start of each of rates and returns the *task.Held of a start at now
// they hold, having booked its slot if task.RateHold says so; nil if they let it start.
func rateHold(ctx context.Context, tx *sql.Tx, t task.Task, prev int64, rates []task.Limit, now time.Time) (*task.Held, error) {
	next := make([]time.Time, len(rates))
	for i, l := range rates {
		var at sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT next_at FROM limit_rates WHERE lambda = ? AND scope = ?`, t.Lambda, scopeOf(l)).Scan(&at)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("sqlitestore: update %s/%s: read the %s: %w", t.Lambda, t.ID, l.Name, err)
		}
		if at.Valid {
			next[i] = fromNanos(at)
		}
	}
	held, book := task.RateHold(rates, next, now)
	if held == nil || !book {
		return held, nil
	}
	for _, l := range rates {
		if err := setNextStart(ctx, tx, t.Lambda, l, held.Until.Add(l.Rate.Interval())); err != nil {
			return nil, fmt.Errorf("sqlitestore: update %s/%s: book a slot under the %s: %w", t.Lambda, t.ID, l.Name, err)
		}
	}
	_, err := tx.ExecContext(ctx, `UPDATE tasks SET rate_slot = ?, version = version + 1 WHERE lambda = ? AND id = ? AND version = ?`,
		nanos(held.Until), t.Lambda, t.ID, prev)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: update %s/%s: book a slot: %w", t.Lambda, t.ID, err)
	}
	return held, nil
}

// setNextStart sets when the next start under rate l of lambda is due.
func setNextStart(ctx context.Context, tx *sql.Tx, lambda string, l task.Limit, next time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO limit_rates (lambda, scope, next_at) VALUES (?, ?, ?)
		ON CONFLICT (lambda, scope) DO UPDATE SET next_at = excluded.next_at`, lambda, scopeOf(l), nanos(next))
	return err
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
