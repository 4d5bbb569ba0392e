package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/openatf/atf/shared/task"
)

// recordSQL records an ended attempt; recording it again (its number) replaces it with itself.
const recordSQL = `INSERT OR REPLACE INTO attempts (lambda, id, attempt, started_at, ended_at, outcome, error, worker, log, log_location)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// dropSQL deletes the attempts of a task up to a number: those a new one pushed out of its
// history.
const dropSQL = `DELETE FROM attempts WHERE lambda = ? AND id = ? AND attempt <= ?`

// historySQL reads a task's history, and whether the task exists: a task without attempts
// gives one row of NULLs, a missing task none.
var historySQL = `SELECT a.attempt, a.started_at, a.ended_at, a.outcome, a.error, a.worker, a.log, a.log_location
	FROM tasks t LEFT JOIN attempts a ON a.lambda = t.lambda AND a.id = t.id
	WHERE t.lambda = ? AND t.id = ? ORDER BY a.attempt DESC LIMIT ` + strconv.Itoa(task.MaxHistory)

// recordAttempt records t.Ended, if t's transition ended an attempt, with its log, in the
// transaction of the transition's write, and drops the attempts it pushes out of the history.
// A success without a log is not recorded: it is the task's last attempt, which its row holds
// (task.Task.LastAttempt), so a task that succeeds at once writes its row and nothing more, as
// on DynamoDB.
func recordAttempt(ctx context.Context, stmts updateStmts, t task.Task) error {
	a := t.Ended
	if a == nil || a.Outcome == task.OutcomeSuccess && a.Log == "" {
		return nil
	}
	if _, err := stmts.record.ExecContext(ctx, t.Lambda, t.ID, a.Number, nanos(a.StartedAt), a.EndedAt.UnixNano(), string(a.Outcome), a.Error, a.Worker, a.Log, logLocationArg(a.LogLocation)); err != nil {
		return fmt.Errorf("sqlitestore: record attempt %d of %s/%s: %w", a.Number, t.Lambda, t.ID, err)
	}
	if a.Number > task.MaxHistory {
		if _, err := stmts.drop.ExecContext(ctx, t.Lambda, t.ID, a.Number-task.MaxHistory); err != nil {
			return fmt.Errorf("sqlitestore: drop old attempts of %s/%s: %w", t.Lambda, t.ID, err)
		}
	}
	return nil
}

// Attempts returns a task's history (task.HistoryStore), or task.ErrNotFound.
func (s *Store) Attempts(ctx context.Context, lambda, id string) (task.History, error) {
	rows, err := s.history.QueryContext(ctx, lambda, id)
	if err != nil {
		return task.History{}, fmt.Errorf("sqlitestore: attempts of %s/%s: %w", lambda, id, err)
	}
	defer rows.Close()
	found := false
	var kept []task.Attempt
	for rows.Next() {
		found = true
		var number, started, ended sql.NullInt64
		var outcome, msg, worker, log, logs sql.NullString
		if err := rows.Scan(&number, &started, &ended, &outcome, &msg, &worker, &log, &logs); err != nil {
			return task.History{}, fmt.Errorf("sqlitestore: attempts of %s/%s: %w", lambda, id, err)
		}
		if !number.Valid {
			continue // the task, without attempts
		}
		a := task.Attempt{
			Number: int(number.Int64), StartedAt: fromNanos(started), EndedAt: fromNanos(ended),
			Outcome: task.Outcome(outcome.String), Error: msg.String, Worker: worker.String, Log: log.String,
		}
		if a.LogLocation, err = scanLogLocation(logs); err != nil {
			return task.History{}, fmt.Errorf("sqlitestore: attempts of %s/%s: %w", lambda, id, err)
		}
		kept = append(kept, a)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return task.History{}, fmt.Errorf("sqlitestore: attempts of %s/%s: %w", lambda, id, err)
	}
	if !found {
		return task.History{}, task.Errorf(task.ErrNotFound, "task %q of lambda %s not found", id, lambda)
	}
	// A success recorded by its row alone (recordAttempt).
	if len(kept) == 0 || kept[0].Outcome != task.OutcomeSuccess {
		t, err := s.GetState(ctx, lambda, id)
		if err != nil {
			return task.History{}, err
		}
		if last, ended := t.LastAttempt(); ended && !slices.ContainsFunc(kept, func(a task.Attempt) bool { return a.Number == last.Number }) {
			kept = append(kept, last)
		}
	}
	return task.NewHistory(kept), nil
}

// logLocationArg is the log_location column of l: its JSON, or NULL.
func logLocationArg(l *task.LogLocation) any {
	if l == nil {
		return nil
	}
	b, _ := json.Marshal(l) // strings only: it cannot fail
	return string(b)
}

// scanLogLocation reads back a log_location column.
func scanLogLocation(col sql.NullString) (*task.LogLocation, error) {
	if !col.Valid || col.String == "" {
		return nil, nil
	}
	var l task.LogLocation
	if err := json.Unmarshal([]byte(col.String), &l); err != nil {
		return nil, fmt.Errorf("log_location: %w", err)
	}
	return &l, nil
}
