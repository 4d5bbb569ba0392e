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

// The counts by status (task_counts) are kept in the transaction of the writes they count, so
// they commit with the rows they count or roll back with them: a crash or a power loss leaves them
// as right as the rows, as it undoes whole transactions.
//
// A task's moves and deletes are counted in Go: each transaction adds them up per (lambda,
// status) and writes each count row once, with countSQL, before it commits. Every write that
// changes a status or deletes a task counts so: the group writer (updates, redrives),
// AddUpstreams and Prune. Triggers counted them before, at two count rows per transition; a group
// commit of a hundred claims now writes two rows in all.
//
// Inserts are still counted by a trigger (task_counts_insert in the schema), one count row per
// task created: an app's CreateTx inserts in its own transaction, with the atf version it was
// built with, which may be older than the store that owns the file. Every version's inserts count
// so, and it costs a create one row.

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

// legacyCountTriggers are the triggers that counted moves and deletes before: an older atf that
// opens the file makes them again (CREATE TRIGGER IF NOT EXISTS), and with them each move would
// count twice.
var legacyCountTriggers = []string{"task_counts_update", "task_counts_delete"}

// dropCountTriggers drops the legacy count triggers, if the file has any, and counts the tasks
// afresh, in one transaction: an older atf that wrote the file since kept the counts by its
// triggers, right for it, and this version goes on from a count of the rows. Open calls it before
// any write, and the file has one Store open on it at a time (see the package doc).
func dropCountTriggers(w *sql.DB) error {
	tx, err := w.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var found int
	if err := tx.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name IN (?, ?)`,
		legacyCountTriggers[0], legacyCountTriggers[1]).Scan(&found); err != nil || found == 0 {
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

// maxRemembered bounds each of a statusMemo's two generations.
const maxRemembered = 1 << 16

// statusMemo remembers, for the tasks the group writer wrote last, the version and status each
// was written with: an update over that version replaces that status, so the writer counts its
// move without reading the row first. A memo is a guess only: the update's statement carries the
// status as a condition (updateStateSQL), so a wrong guess matches no row, and the writer reads
// the row and writes again. Writes outside the group writer (AddUpstreams, a rate's booking, a
// prune, CreateTx, FireSchedule) are thus never a risk to the counts, only a miss.
//
// Only the writer goroutine uses it. Its writes are noted as pending and kept once their
// transaction commits. It keeps two generations of at most maxRemembered tasks each, the older
// dropped when the newer is full, so the tasks in flight are found and its memory is bounded.
type statusMemo struct {
	newer, older, pending map[task.Ref]versioned
}

// versioned is a task's status at a version.
type versioned struct {
	version int64
	status  task.Status
}

func newStatusMemo() *statusMemo {
	return &statusMemo{newer: map[task.Ref]versioned{}, older: map[task.Ref]versioned{}, pending: map[task.Ref]versioned{}}
}

// status is the status ref was last written with, if that write made the given version.
func (m *statusMemo) status(ref task.Ref, version int64) (task.Status, bool) {
	v, ok := m.pending[ref]
	if !ok {
		if v, ok = m.newer[ref]; !ok {
			v = m.older[ref]
		}
	}
	return v.status, v.status != "" && v.version == version
}

// note remembers a write of the transaction under way. An ended task without a trigger is
// forgotten instead: few are written again (a redrive). One with a trigger has downstreams to
// tell, each telling a write of it.
func (m *statusMemo) note(t task.Task) {
	if slices.Contains(task.Ended, t.Status) && t.NextTriggerAt == nil {
		m.pending[t.Ref()] = versioned{} // hides an older memo until the commit drops it
		return
	}
	m.pending[t.Ref()] = versioned{t.Version, t.Status}
}

// commit keeps the pending notes: their transaction committed.
func (m *statusMemo) commit() {
	for ref, v := range m.pending {
		delete(m.older, ref)
		if v.status == "" {
			delete(m.newer, ref)
			continue
		}
		if _, ok := m.newer[ref]; !ok && len(m.newer) >= maxRemembered {
			m.older, m.newer = m.newer, make(map[task.Ref]versioned, maxRemembered)
		}
		m.newer[ref] = v
	}
	clear(m.pending)
}

// abort drops the pending notes: their transaction rolled back.
func (m *statusMemo) abort() { clear(m.pending) }
