package sqlitestore

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/openatf/atf/shared/task"
)

// failedSchema indexes the tasks that failed for good, one partial index per status of
// task.Failed, latest updated first when read backwards. Few tasks fail: the other transitions
// write neither index. A query names its status as the index does, so that SQLite uses it.
var failedSchema = func() string {
	var b strings.Builder
	for _, s := range task.Failed {
		fmt.Fprintf(&b, "\nCREATE INDEX IF NOT EXISTS tasks_%s ON tasks (updated_at, lambda, id) WHERE status = '%s';", s, s)
	}
	return b.String()
}()

// ListFailed returns a page of the tasks of every lambda that failed for good, latest updated
// first (task.RedriveStore). It reads each status's index down from the cursor, one task more
// than the page, and keeps the first of their merge: each has read at least as many as the page
// holds, so none of the page's is missed. A page reads at most (limit+1) rows per status,
// whatever the number of tasks.
func (s *Store) ListFailed(ctx context.Context, p task.FailedParams) ([]task.Task, string, error) {
	if err := p.Validate(); err != nil {
		return nil, "", err
	}
	limit := p.PageSize()
	var below *failedPosition
	if p.Cursor != "" {
		pos, err := decodeFailedCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		below = &pos
	}
	var all []task.Task
	for _, status := range p.StatusSet() {
		// The status is one of task.Failed (Validate), so it goes into the query as its index
		// names it.
		q := `SELECT ` + columns + ` FROM tasks WHERE status = '` + string(status) + `'`
		var args []any
		if below != nil {
			q += ` AND (updated_at, lambda, id) < (?, ?, ?)`
			args = append(args, below.updated, below.lambda, below.id)
		}
		q += ` ORDER BY updated_at DESC, lambda DESC, id DESC LIMIT ?`
		args = append(args, limit+1)
		tasks, err := s.query(ctx, q, args...)
		if err != nil {
			return nil, "", fmt.Errorf("sqlitestore: list failed tasks: %w", err)
		}
		all = append(all, tasks...)
	}
	slices.SortFunc(all, func(a, b task.Task) int { return positionOf(b).compare(positionOf(a)) })
	if len(all) <= limit {
		return all, "", nil
	}
	all = all[:limit]
	return all, positionOf(all[limit-1]).cursor(), nil
}

// failedPosition is where a task sits among the failed ones: by update time, lambda, then id.
type failedPosition struct {
	updated    int64
	lambda, id string
}

func positionOf(t task.Task) failedPosition {
	return failedPosition{t.UpdatedAt.UnixNano(), t.Lambda, t.ID}
}

func (a failedPosition) compare(b failedPosition) int {
	return cmp.Or(cmp.Compare(a.updated, b.updated), cmp.Compare(a.lambda, b.lambda), cmp.Compare(a.id, b.id))
}

// cursor is the position as "<updated nanos>#<lambda>#<id>" in base64url: neither a lambda name
// nor an id holds a '#'.
func (a failedPosition) cursor() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(a.updated, 10) + "#" + a.lambda + "#" + a.id))
}

func decodeFailedCursor(c string) (failedPosition, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if parts := strings.Split(string(b), "#"); err == nil && len(parts) == 3 {
		n, perr := strconv.ParseInt(parts[0], 10, 64)
		if perr == nil && task.ValidateName("lambda", parts[1]) == nil && task.ValidateID("id", parts[2]) == nil {
			return failedPosition{n, parts[1], parts[2]}, nil
		}
	}
	return failedPosition{}, task.Errorf(task.ErrInvalid, "cursor %q is not one this store returned", task.Echo(c))
}
