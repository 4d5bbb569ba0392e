package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openatf/atf/shared/task"
)

// listFilters reads a list's filters beyond the collection: status, one or several separated by
// commas ("dead,fatal_failure"), and created_from and created_to, RFC 3339 times bounding the
// creation time (from inclusive, to exclusive).
func listFilters(q url.Values, p *task.ListParams) error {
	for _, v := range q["status"] {
		for _, st := range strings.Split(v, ",") {
			if st != "" {
				p.Statuses = append(p.Statuses, task.Status(st))
			}
		}
	}
	for name, at := range map[string]*time.Time{"created_from": &p.CreatedFrom, "created_to": &p.CreatedTo} {
		if !q.Has(name) {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, q.Get(name))
		if err != nil {
			return task.Errorf(task.ErrInvalid, "%s %q is not an RFC 3339 time, such as \"2026-01-02T15:04:05Z\"", name, task.Echo(q.Get(name)))
		}
		*at = v
	}
	return nil
}

// redriveOptions is the body of a redrive: what the task's second life changes. A payload absent
// or null keeps the task's.
type redriveOptions struct {
	Payload     json.RawMessage `json:"payload"`
	Priority    string          `json:"priority"`
	MaxAttempts int             `json:"max_attempts"`
}

func (o redriveOptions) options() task.RedriveOptions {
	r := task.RedriveOptions{Payload: o.Payload, Priority: o.Priority, MaxAttempts: o.MaxAttempts}
	if string(r.Payload) == "null" {
		r.Payload = nil
	}
	return r
}

// decodeOptional is decode for a body that may be empty, as a redrive that changes nothing sends.
func (a *api) decodeOptional(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil && len(bytes.TrimSpace(body)) == 0 {
		return true
	}
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
	return a.decode(w, r, limit, v)
}

// errReader hands decode the error that cut the body short, after what was read.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err == nil {
		return 0, io.EOF
	}
	return 0, e.err
}

// redrive answers the task redriven: 200, or 409 if it did not fail for good or cannot be
// redriven (see task.Redrive).
func (a *api) redrive(w http.ResponseWriter, r *http.Request) {
	var req redriveOptions
	if !a.decodeOptional(w, r, int64(a.svc.PayloadLimit())+envelopeLimit, &req) {
		return
	}
	t, err := a.svc.Redrive(r.Context(), r.PathValue("lambda"), r.PathValue("id"), req.options())
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, t)
}

// redriveMatching redrives the failed tasks of one page of a filtered list and answers
// {"redriven": n, "skipped": n, "skips": [{"id","reason"}], "next_cursor": "..."}; a caller goes
// on with next_cursor until it is empty. The filters are a list's: status (dead, fatal_failure or
// both, the default), collection, created_from, created_to, limit (at most, and by default,
// task.MaxRedriveLimit) and cursor.
func (a *api) redriveMatching(w http.ResponseWriter, r *http.Request) {
	var req struct {
		redriveOptions
		Status      string     `json:"status"`
		Collection  string     `json:"collection"`
		CreatedFrom *time.Time `json:"created_from"`
		CreatedTo   *time.Time `json:"created_to"`
		Limit       int        `json:"limit"`
		Cursor      string     `json:"cursor"`
	}
	if !a.decodeOptional(w, r, int64(a.svc.PayloadLimit())+envelopeLimit, &req) {
		return
	}
	p := task.ListParams{Lambda: r.PathValue("lambda"), Collection: req.Collection, Limit: req.Limit, Cursor: req.Cursor}
	for _, st := range strings.Split(req.Status, ",") {
		if st != "" {
			p.Statuses = append(p.Statuses, task.Status(st))
		}
	}
	if req.CreatedFrom != nil {
		p.CreatedFrom = *req.CreatedFrom
	}
	if req.CreatedTo != nil {
		p.CreatedTo = *req.CreatedTo
	}
	res, err := a.svc.RedriveMatching(r.Context(), p, req.options())
	if err != nil {
		a.fail(w, err)
		return
	}
	if res.Skips == nil {
		res.Skips = []task.RedriveSkip{}
	}
	a.writeJSON(w, http.StatusOK, map[string]any{
		"redriven": res.Redriven, "skipped": res.Skipped, "skips": res.Skips, "next_cursor": res.Next,
	})
}
