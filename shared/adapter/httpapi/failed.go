package httpapi

import (
	"net/http"
	"strings"

	"github.com/openatf/atf/shared/task"
)

// listFailed answers GET /v1/tasks: a page of the tasks of every lambda that failed for good,
// latest updated first. status (dead, fatal_failure, or both, comma-separated) is all it filters
// by, and both if absent; limit and cursor page as a lambda's list does. Its path names no
// lambda: an IAM policy that allows a client its own lambdas' paths does not allow it.
func (a *api) listFailed(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	// A lambda's list's other filters would be ignored here: say so rather than answer more.
	for _, name := range []string{"collection", "created_from", "created_to"} {
		if q.Has(name) {
			a.fail(w, task.Errorf(task.ErrInvalid, "GET /v1/tasks filters by status only (dead, fatal_failure); %s is a filter of a lambda's list, GET /v1/lambdas/{lambda}/tasks", name))
			return
		}
	}
	p := task.FailedParams{Cursor: q.Get("cursor")}
	for _, v := range q["status"] {
		for _, st := range strings.Split(v, ",") {
			if st != "" {
				p.Statuses = append(p.Statuses, task.Status(st))
			}
		}
	}
	var err error
	if p.Limit, err = limitOf(q); err != nil {
		a.fail(w, err)
		return
	}
	a.writePage(w, func(limit int) ([]task.Task, string, error) {
		if limit > 0 {
			p.Limit = limit
		}
		return a.svc.ListFailed(r.Context(), p)
	})
}
