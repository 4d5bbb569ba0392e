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

// Schedules are rows of the table schedules: the schedule as JSON in body, with the columns the
// due read and the conditional writes need. They are written straight through the writer
// connection, not group-committed: a schedule is written once per firing, not once per task.

// storedSchedule is a schedule's body: the schedule with its request's fingerprint, its
// incarnation and its next firing, which an answer leaves out.
type storedSchedule struct {
	task.Schedule
	Spec        string    `json:"spec"`
	Incarnation string    `json:"incarnation,omitempty"`
	NextFire    time.Time `json:"next_fire"`
}

func scheduleBody(sc task.Schedule) ([]byte, error) {
	sc.NextFires, sc.FireIDTag = nil, ""
	return json.Marshal(storedSchedule{Schedule: sc, Spec: sc.Spec, Incarnation: sc.Incarnation, NextFire: sc.NextFire})
}

// sameSchedule is the condition of a write over a schedule read at a version: the version, and
// the incarnation (in the body; a schedule stored before incarnations has none).
const sameSchedule = `lambda = ? AND id = ? AND version = ? AND coalesce(json_extract(body, '$.incarnation'), '') = ?`

func scanSchedule(row interface{ Scan(...any) error }) (task.Schedule, error) {
	var body []byte
	if err := row.Scan(&body); err != nil {
		return task.Schedule{}, err
	}
	var st storedSchedule
	if err := json.Unmarshal(body, &st); err != nil {
		return task.Schedule{}, fmt.Errorf("a schedule's body: %w", err)
	}
	st.Schedule.Spec, st.Schedule.Incarnation, st.Schedule.NextFire = st.Spec, st.Incarnation, st.NextFire
	return st.Schedule, nil
}

// CreateSchedule stores a new schedule, or returns task.ErrExists.
func (s *Store) CreateSchedule(ctx context.Context, sc task.Schedule) error {
	body, err := scheduleBody(sc)
	if err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, `INSERT INTO schedules (lambda, id, state, next_fire, version, body) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (lambda, id) DO NOTHING`, sc.Lambda, sc.ID, sc.State, sc.NextFire.UnixNano(), sc.Version, body)
	if err != nil {
		return storageError(fmt.Errorf("sqlitestore: create schedule %s: %w", sc, err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return task.Errorf(task.ErrExists, "schedule %q of lambda %s already exists", sc.ID, sc.Lambda)
	}
	return nil
}

// GetSchedule returns one schedule, or task.ErrNotFound.
func (s *Store) GetSchedule(ctx context.Context, lambda, id string) (task.Schedule, error) {
	sc, err := scanSchedule(s.r.QueryRowContext(ctx, `SELECT body FROM schedules WHERE lambda = ? AND id = ?`, lambda, id))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return task.Schedule{}, task.Errorf(task.ErrNotFound, "schedule %q of lambda %s not found", id, lambda)
	case err != nil:
		return task.Schedule{}, fmt.Errorf("sqlitestore: get schedule %s/%s: %w", lambda, id, err)
	}
	return sc, nil
}

// ListSchedules returns a page of one lambda's schedules in id order; the cursor is the last id.
func (s *Store) ListSchedules(ctx context.Context, lambda, cursor string, limit int) ([]task.Schedule, string, error) {
	limit = max(1, min(limit, task.MaxListLimit))
	list, err := s.schedules(ctx, `SELECT body FROM schedules WHERE lambda = ? AND id > ? ORDER BY id LIMIT ?`, lambda, cursor, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("sqlitestore: list schedules of %s: %w", lambda, err)
	}
	if len(list) <= limit {
		return list, "", nil
	}
	list = list[:limit]
	return list, list[limit-1].ID, nil
}

// UpdateSchedule writes sc if the stored version is still prev, in one statement.
func (s *Store) UpdateSchedule(ctx context.Context, sc task.Schedule, prev int64) error {
	err := updateSchedule(ctx, s.w, sc, prev)
	if err != nil && !errors.Is(err, task.ErrConflict) {
		return storageError(fmt.Errorf("sqlitestore: update schedule %s: %w", sc, err))
	}
	return err
}

// updateSchedule writes sc over version prev of the same incarnation, or returns
// task.ErrConflict.
func updateSchedule(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, sc task.Schedule, prev int64) error {
	body, err := scheduleBody(sc)
	if err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, `UPDATE schedules SET state = ?, next_fire = ?, version = ?, body = ? WHERE `+sameSchedule,
		sc.State, sc.NextFire.UnixNano(), sc.Version, body, sc.Lambda, sc.ID, prev, sc.Incarnation)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return task.Errorf(task.ErrConflict, "schedule %s changed or was deleted", sc)
	}
	return nil
}

// FireSchedule writes sc over version prev and inserts the tasks whose ids are free, in one
// transaction on the writer connection (synced, as a create is): a conflict writes nothing.
func (s *Store) FireSchedule(ctx context.Context, sc task.Schedule, prev int64, tasks []task.Task) ([]bool, error) {
	if len(tasks) > task.MaxFiringsPerWrite {
		return nil, task.Errorf(task.ErrInvalid, "a firing write holds at most %d tasks, got %d", task.MaxFiringsPerWrite, len(tasks))
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, storageError(fmt.Errorf("sqlitestore: fire schedule %s: %w", sc, err))
	}
	defer tx.Rollback()
	if err := updateSchedule(ctx, tx, sc, prev); err != nil {
		if errors.Is(err, task.ErrConflict) {
			return nil, err
		}
		return nil, storageError(fmt.Errorf("sqlitestore: fire schedule %s: %w", sc, err))
	}
	insert := tx.StmtContext(ctx, s.insert)
	created := make([]bool, len(tasks))
	for i, t := range tasks {
		res, err := insert.ExecContext(ctx, insertArgs(t)...)
		if err != nil {
			return nil, storageError(fmt.Errorf("sqlitestore: fire schedule %s: create %s: %w", sc, t.ID, err))
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: fire schedule %s: create %s: %w", sc, t.ID, err)
		}
		created[i] = n > 0 // none: the id is taken, and insertSQL left it as it was
	}
	if err := tx.Commit(); err != nil {
		return nil, storageError(fmt.Errorf("sqlitestore: fire schedule %s: %w", sc, err))
	}
	return created, nil
}

// DeleteSchedule removes a schedule, or returns task.ErrNotFound.
func (s *Store) DeleteSchedule(ctx context.Context, lambda, id string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM schedules WHERE lambda = ? AND id = ?`, lambda, id)
	if err != nil {
		return storageError(fmt.Errorf("sqlitestore: delete schedule %s/%s: %w", lambda, id, err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return task.Errorf(task.ErrNotFound, "schedule %q of lambda %s not found", id, lambda)
	}
	return nil
}

// DueSchedules reads the active schedules due by before through schedules_due.
func (s *Store) DueSchedules(ctx context.Context, lambda string, before time.Time, limit int) ([]task.Schedule, error) {
	list, err := s.schedules(ctx, `SELECT body FROM schedules WHERE lambda = ? AND state = 'active' AND next_fire <= ? ORDER BY next_fire, id LIMIT ?`,
		lambda, before.UnixNano(), max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: due schedules of %s: %w", lambda, err)
	}
	return list, nil
}

func (s *Store) schedules(ctx context.Context, q string, args ...any) ([]task.Schedule, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []task.Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, sc)
	}
	return list, rows.Err()
}
