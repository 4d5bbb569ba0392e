package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/openatf/atf/shared/task"
)

// CreateTx creates t, a task made by task.New, in tx: the app's own transaction on the store's
// database file, so that the task exists if and only if tx commits. It returns task.ErrExists,
// having written nothing, if t's id is taken; the app may roll back or go on.
//
// The task is waiting, due at its run time. A store open on the same file (atf dev's) finds it at
// its consumer's next sweep, at most a poll interval (task.Config.PollInterval) after the commit:
// nothing wakes that consumer, which only hears of the writes its own process makes. The task
// counts follow: the insert's trigger counts the task in tx. Tasks with upstreams (After) are
// refused: a flow's upstreams are linked by the frontend, outside any one transaction.
//
// Open the app's database with a busy timeout and begin its transactions immediate (the driver's
// "?_pragma=busy_timeout(10000)&_txlock=immediate"): atf's writer shares the file, and a
// transaction that reads before it writes could otherwise fail at once with SQLITE_BUSY. Keep the
// transaction short, and make no call that writes through atf (its API, a Store of the same
// file) while it is open: atf's writer waits for its lock (up to the busy timeout, 10 s).
func CreateTx(ctx context.Context, tx *sql.Tx, t task.Task) error {
	if len(t.After) > 0 {
		return task.Errorf(task.ErrInvalid, "task %q of lambda %s: a task with upstreams cannot be created in a transaction", t.ID, t.Lambda)
	}
	var stmts createStmts
	for _, p := range []struct {
		stmt **sql.Stmt
		q    string
	}{{&stmts.insert, insertSQL}, {&stmts.taken, takenSQL}} {
		st, err := tx.PrepareContext(ctx, p.q)
		if err != nil {
			return fmt.Errorf("sqlitestore: create %s/%s: %w", t.Lambda, t.ID, err)
		}
		defer st.Close()
		*p.stmt = st
	}
	outcome, err := createIn(ctx, tx, stmts, []task.Task{t})
	if err != nil {
		return storageError(err)
	}
	return outcome
}
