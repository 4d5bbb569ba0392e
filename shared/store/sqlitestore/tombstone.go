package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Tombstones: the nonces of messages sent before their task was written that found no task
// (task.Store.Bury), in a table of their own, so that no read of tasks meets them. A create
// carrying one of them fails with task.ErrBuried. Prune deletes them once past their time.

// buryNonceSQL records a nonce for a task that does not exist, in one statement: the writer's
// one connection orders it with the creates, whose transaction checks the tombstones (createIn).
const buryNonceSQL = `INSERT INTO tombstones (lambda, id, nonce, expires_at)
	SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE lambda = ? AND id = ?)
	ON CONFLICT (lambda, id, nonce) DO UPDATE SET expires_at = excluded.expires_at`

// Bury records that the message of nonce found no task lambda/id, or fails with task.ErrExists
// if the task exists.
func (s *Store) Bury(ctx context.Context, lambda, id, nonce string, until time.Time) error {
	res, err := s.w.ExecContext(ctx, buryNonceSQL, lambda, id, nonce, until.UnixNano(), lambda, id)
	if err != nil {
		return storageError(fmt.Errorf("sqlitestore: bury a message of %s/%s: %w", lambda, id, err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlitestore: bury a message of %s/%s: %w", lambda, id, err)
	} else if n == 0 {
		return task.Errorf(task.ErrExists, "task %q of lambda %s exists", id, lambda)
	}
	return nil
}

// buriedSQL finds which of a JSON array of ids a lambda has tombstones for, with their nonces.
const buriedSQL = `SELECT id, nonce FROM tombstones WHERE lambda = ? AND id IN (SELECT value FROM json_each(?))`

// buriedNonce returns the first task of tasks whose nonce a tombstone holds, or nil: one query
// per lambda of the batch's tasks that carry a nonce, none for a batch without.
func buriedNonce(ctx context.Context, tx *sql.Tx, tasks []task.Task) (*task.Task, error) {
	byLambda := map[string][]string{}
	for _, t := range tasks {
		if t.Nonce != "" {
			byLambda[t.Lambda] = append(byLambda[t.Lambda], t.ID)
		}
	}
	buried := map[[3]string]bool{}
	for lambda, ids := range byLambda {
		list, err := json.Marshal(ids)
		if err != nil {
			return nil, err
		}
		rows, err := tx.QueryContext(ctx, buriedSQL, lambda, string(list))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id, nonce string
			if err := rows.Scan(&id, &nonce); err != nil {
				rows.Close()
				return nil, err
			}
			buried[[3]string{lambda, id, nonce}] = true
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
	}
	for i, t := range tasks {
		if t.Nonce != "" && buried[[3]string{t.Lambda, t.ID, t.Nonce}] {
			return &tasks[i], nil
		}
	}
	return nil, nil
}
