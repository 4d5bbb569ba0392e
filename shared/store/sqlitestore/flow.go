package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openatf/atf/shared/task"
)

// The task.FlowStore of SQLite. A task's upstreams are rows of deps, written in the transaction
// that creates the task (or adds upstreams to it), and they are its edges too: deps_by_up indexes
// them by upstream.

// AddEdges writes nothing: here the edges are the deps rows of the downstream tasks, written
// atomically with each task by Create, CreateBatch and AddUpstreams, so Downstreams finds every
// edge of a task that exists, and none of a task whose create failed.
func (s *Store) AddEdges(context.Context, []task.Edge) error { return nil }

// downstreamsSQL reads a page of an upstream's edges from deps_by_up, in its order, after a
// position.
const downstreamsSQL = `SELECT down_lambda, down_id, idx FROM deps
	WHERE up_lambda = ? AND up_id = ? AND (down_lambda, down_id, idx) > (?, ?, ?)
	ORDER BY down_lambda, down_id, idx LIMIT ?`

// Downstreams returns a page of up's edges in the order of their downstream (lambda, id, index).
// The cursor is the position of the last edge returned.
func (s *Store) Downstreams(ctx context.Context, up task.Ref, cursor string, limit int) ([]task.Edge, string, error) {
	if limit < 1 {
		return nil, "", task.Errorf(task.ErrInvalid, "downstreams: limit must be at least 1, got %d", limit)
	}
	var after edgePosition
	if cursor != "" {
		var err error
		if after, err = decodeEdgeCursor(cursor); err != nil {
			return nil, "", err
		}
	} else {
		after.Index = -1 // before every edge: ('', '', -1) sorts first
	}
	// One row more than the page tells whether another page follows.
	args := []any{up.Lambda, up.ID, after.Lambda, after.ID, after.Index, limit + 1}
	if s.traced != nil {
		s.traced(downstreamsSQL, args)
	}
	rows, err := s.r.QueryContext(ctx, downstreamsSQL, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlitestore: downstreams of %s: %w", up, err)
	}
	defer rows.Close()
	var edges []task.Edge
	for rows.Next() {
		e := task.Edge{Up: up}
		if err := rows.Scan(&e.Down.Lambda, &e.Down.ID, &e.Index); err != nil {
			return nil, "", fmt.Errorf("sqlitestore: downstreams of %s: %w", up, err)
		}
		edges = append(edges, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlitestore: downstreams of %s: %w", up, err)
	}
	if len(edges) <= limit {
		return edges, "", nil
	}
	edges = edges[:limit]
	last := edges[limit-1]
	return edges, encodeEdgeCursor(edgePosition{last.Down.Lambda, last.Down.ID, last.Index}), nil
}

// edgePosition is where an edge sits among its upstream's: its downstream, then its index.
type edgePosition struct {
	Lambda string `json:"l"`
	ID     string `json:"i"`
	Index  int    `json:"x"`
}

// The cursor of Downstreams is the JSON of an edgePosition in base64url: opaque to callers.
func encodeEdgeCursor(p edgePosition) string {
	b, _ := json.Marshal(p) // strings and an int: cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeEdgeCursor(c string) (edgePosition, error) {
	var p edgePosition
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil || p.Lambda == "" || p.ID == "" || p.Index < 0 {
		return edgePosition{}, task.Errorf(task.ErrInvalid, "cursor %q is not one this store returned", task.Echo(c))
	}
	return p, nil
}

// upstreamsSQL reads After[from:to] of a task.
const upstreamsSQL = `SELECT up_lambda, up_id FROM deps
	WHERE down_lambda = ? AND down_id = ? AND idx >= ? AND idx < ? ORDER BY idx`

// Upstreams returns down's After[from : from+limit], shorter at its end, and none for a task
// that does not exist.
func (s *Store) Upstreams(ctx context.Context, down task.Ref, from, limit int) ([]task.Ref, error) {
	if from < 0 || limit < 1 {
		return nil, task.Errorf(task.ErrInvalid, "upstreams: from must be at least 0 and limit at least 1, got %d and %d", from, limit)
	}
	refs, err := upstreams(ctx, s.getAfter, down, from, min(from+limit, task.MaxAfter))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: upstreams of %s: %w", down, err)
	}
	return refs, nil
}

// upstreams reads After[from:to] of down with upstreamsSQL, prepared as stmt.
func upstreams(ctx context.Context, stmt *sql.Stmt, down task.Ref, from, to int) ([]task.Ref, error) {
	rows, err := stmt.QueryContext(ctx, down.Lambda, down.ID, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var refs []task.Ref
	for rows.Next() {
		var r task.Ref
		if err := rows.Scan(&r.Lambda, &r.ID); err != nil {
			return nil, err
		}
		refs = append(refs, r)
	}
	return refs, rows.Err()
}

// maxInList is how many ids one query of GetMany names, well within SQLite's limit of variables.
const maxInList = 500

// GetMany reads tasks without payload nor After, by lambda, maxInList ids a query, and returns
// them in the order of refs, a zero Task for each that does not exist.
func (s *Store) GetMany(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	return s.getMany(ctx, refs, s.getStates, stateColumns)
}

// GetBatch reads tasks with their payloads, without After, as GetMany does (task.BatchGetter).
func (s *Store) GetBatch(ctx context.Context, refs []task.Ref) ([]task.Task, error) {
	return s.getMany(ctx, refs, s.getTasks, columns)
}

// getManySQL reads the tasks of one lambda whose ids a JSON array lists, with the columns cols:
// one statement, prepared once, whatever their number (a statement with a variable per id was
// parsed afresh each time, which cost as much as running it).
func getManySQL(cols string) string {
	return `SELECT ` + cols + ` FROM tasks WHERE lambda = ? AND id IN (SELECT value FROM json_each(?))`
}

// getMany reads refs with stmt, getManySQL(cols) prepared.
func (s *Store) getMany(ctx context.Context, refs []task.Ref, stmt *sql.Stmt, cols string) ([]task.Task, error) {
	byLambda := map[string][]string{}
	var lambdas []string
	for _, r := range refs {
		if _, ok := byLambda[r.Lambda]; !ok {
			lambdas = append(lambdas, r.Lambda)
		}
		byLambda[r.Lambda] = append(byLambda[r.Lambda], r.ID)
	}
	kept := s.keptAmong(refs) // before the rows are read: see the end
	found := make(map[task.Ref]task.Task, len(refs))
	for _, l := range lambdas {
		ids := byLambda[l]
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), maxInList)]
			ids = ids[len(chunk):]
			tasks, err := s.queryIDs(ctx, stmt, cols, l, chunk)
			if err != nil {
				return nil, fmt.Errorf("sqlitestore: get many of %s: %w", l, err)
			}
			for _, t := range tasks {
				found[t.Ref()] = t
			}
		}
	}
	out := make([]task.Task, len(refs))
	for i, r := range refs {
		out[i] = found[r]
	}
	// A task whose entry was written and dropped while the rows were read may have been read
	// as it was before the entry: it is read again, as Get does (live).
	for _, i := range s.liveAll(out, kept) {
		t, err := s.getMany(ctx, []task.Ref{refs[i]}, stmt, cols)
		if err != nil {
			return nil, err
		}
		out[i] = t[0]
	}
	return out, nil
}

// queryIDs reads the tasks of lambda with ids, with stmt, getManySQL(cols) prepared.
func (s *Store) queryIDs(ctx context.Context, stmt *sql.Stmt, cols, lambda string, ids []string) ([]task.Task, error) {
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	if s.traced != nil {
		s.traced(getManySQL(cols), []any{lambda, string(list)})
	}
	return scanTasks(stmt.QueryContext(ctx, lambda, string(list)))
}

// AddUpstreams writes t over version prev, with its upstreams from index from on, in one
// transaction: of racing writers from one version exactly one writes, and the others write
// nothing. It is rare enough to have a transaction of its own rather than join the group commit.
// It counts the move of t's status, if it makes one, in that transaction.
func (s *Store) AddUpstreams(ctx context.Context, t task.Task, prev int64, from int) error {
	if from < 0 || from > len(t.After) || len(t.After) != t.AfterCount {
		return fmt.Errorf("sqlitestore: add upstreams to %s/%s: %d upstreams from %d of %d", t.Lambda, t.ID, len(t.After), from, t.AfterCount)
	}
	err := s.addUpstreams(ctx, t, prev, from)
	if err != nil && !errors.Is(err, task.ErrConflict) {
		return storageError(fmt.Errorf("sqlitestore: add upstreams to %s/%s: %w", t.Lambda, t.ID, err))
	}
	return err
}

func (s *Store) addUpstreams(ctx context.Context, t task.Task, prev int64, from int) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// A claim kept in memory (volatile.go) has moved the task past its row's version. The writer
	// holds the one connection through a group and its entries' changes, so none changes now.
	if _, kept := s.vol.lookup(taskKey{t.Lambda, t.ID}); kept {
		return task.Errorf(task.ErrConflict, "task %q of lambda %s is running", t.ID, t.Lambda)
	}
	// The status it replaces, for the counts: the update's condition, with the version.
	old, found, err := statusAt(ctx, tx.StmtContext(ctx, s.readStatus), t, prev)
	if err != nil {
		return err
	}
	if !found {
		return conflict(t)
	}
	if n, err := execCount(ctx, tx.StmtContext(ctx, s.update), updateArgs(t, prev, old)...); err != nil {
		return err
	} else if n == 0 {
		return conflict(t)
	}
	// The upstreams below the stored count never change (Get relies on it): from must be that
	// count, which the version check alone does not say.
	res, err := tx.ExecContext(ctx, `UPDATE tasks SET after_count = ?, trigger_rule = ? WHERE lambda = ? AND id = ? AND after_count = ?`,
		t.AfterCount, t.Trigger, t.Lambda, t.ID, from)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("the task has other than %d upstreams", from)
	}
	if err := insertUpstreams(ctx, tx, t.Ref(), from, t.After[from:]); err != nil {
		return err
	}
	counts := tally{}
	counts.move(t.Lambda, old, t.Status)
	if err := counts.write(ctx, tx.StmtContext(ctx, s.count)); err != nil {
		return err
	}
	return tx.Commit()
}

// insertUpstreams writes refs as down's After from index from on, with one prepared statement.
// A row already there is replaced: the caller's version check decides who writes.
func insertUpstreams(ctx context.Context, tx *sql.Tx, down task.Ref, from int, refs []task.Ref) error {
	stmt, err := tx.PrepareContext(ctx, `INSERT OR REPLACE INTO deps (down_lambda, down_id, idx, up_lambda, up_id) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i, r := range refs {
		if _, err := stmt.ExecContext(ctx, down.Lambda, down.ID, from+i, r.Lambda, r.ID); err != nil {
			return err
		}
	}
	return nil
}
