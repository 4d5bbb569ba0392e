package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"

	"github.com/openatf/atf/shared/task"
)

// The counts by status (task_counts) are kept by the writes that move tasks, in Go: each
// transaction adds up its moves per (lambda, status) and writes each count row once, with
// countSQL, before it commits. The counts thus commit with the rows they count, or roll back with
// them, and a crash or a power loss leaves them as right as the rows: it undoes whole
// transactions. Triggers kept them before, at two count rows per transition; a group commit of a
// hundred claims now writes two rows in all.
//
// Every write of the tasks table counts: the group writer (creates, updates, redrives), CreateTx,
// FireSchedule, AddUpstreams and Prune. A write that bypassed them would leave the counts off.

// countSQL adds n to a count, making its row if it has none.
const countSQL = `INSERT INTO task_counts (lambda, status, n) VALUES (?, ?, ?)
	ON CONFLICT (lambda, status) DO UPDATE SET n = n + excluded.n`

// countKey is a count row.
type countKey struct {
	lambda string
	status task.Status
}

// tally is the moves of one transaction, per count row.
type tally map[countKey]int

// add counts n tasks more (fewer, if negative) in a status.
func (c tally) add(lambda string, s task.Status, n int) {
	c[countKey{lambda, s}] += n
}

// move counts a task that went from one status to another.
func (c tally) move(lambda string, from, to task.Status) {
	if from != to {
		c.add(lambda, from, -1)
		c.add(lambda, to, 1)
	}
}

// write writes the tally's count rows with stmt (countSQL), in the transaction of the rows it
// counts, in a fixed order.
func (c tally) write(ctx context.Context, stmt interface {
	ExecContext(context.Context, ...any) (sql.Result, error)
}) error {
	keys := slices.SortedFunc(maps.Keys(c), func(a, b countKey) int {
		return cmp.Or(cmp.Compare(a.lambda, b.lambda), cmp.Compare(a.status, b.status))
	})
	for _, k := range keys {
		if n := c[k]; n != 0 {
			if _, err := stmt.ExecContext(ctx, k.lambda, string(k.status), n); err != nil {
				return fmt.Errorf("count the tasks of %s %s: %w", k.lambda, k.status, err)
			}
		}
	}
	return nil
}

// legacyCountTriggers are the triggers that kept the counts before: an older atf that opens the
// file makes them again (CREATE TRIGGER IF NOT EXISTS), and with them each move would count twice.
var legacyCountTriggers = []string{"task_counts_insert", "task_counts_update", "task_counts_delete"}

// dropCountTriggers drops the legacy count triggers, if the file has any, and counts the tasks
// afresh, in one transaction: an older atf that wrote the file since kept the counts by its
// triggers, right for it, and this version goes on from a count of the rows. Open calls it before
// any write, and the file has one opener at a time (see the package doc).
func dropCountTriggers(w *sql.DB) error {
	tx, err := w.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var found int
	if err := tx.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name IN (?, ?, ?)`,
		legacyCountTriggers[0], legacyCountTriggers[1], legacyCountTriggers[2]).Scan(&found); err != nil || found == 0 {
		return err
	}
	for _, name := range legacyCountTriggers {
		if _, err := tx.Exec(`DROP TRIGGER IF EXISTS ` + name); err != nil {
			return fmt.Errorf("drop trigger %s: %w", name, err)
		}
	}
	if err := recount(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// recount sets the counts to a count of the tasks' rows.
func recount(tx *sql.Tx) error {
	for _, q := range []string{
		`DELETE FROM task_counts`,
		`INSERT INTO task_counts (lambda, status, n) SELECT lambda, status, COUNT(*) FROM tasks GROUP BY lambda, status`,
	} {
		if _, err := tx.Exec(q); err != nil {
			return fmt.Errorf("count tasks: %w", err)
		}
	}
	return nil
}

// statusSQL reads a task's status at a version: the status an update over that version replaces.
const statusSQL = `SELECT status FROM tasks WHERE lambda = ? AND id = ? AND version = ?`
