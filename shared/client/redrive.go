package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/openatf/atf/shared/task"
)

// listQuery is the query of a list: its statuses (Status and Statuses, comma-separated), its
// collection, its creation-time range, its limit and its cursor.
func listQuery(p task.ListParams) url.Values {
	q := url.Values{}
	var statuses []string
	for _, st := range p.StatusSet() {
		statuses = append(statuses, string(st))
	}
	for k, v := range map[string]string{"status": strings.Join(statuses, ","), "collection": p.Collection, "cursor": p.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for k, v := range map[string]time.Time{"created_from": p.CreatedFrom, "created_to": p.CreatedTo} {
		if !v.IsZero() {
			q.Set(k, v.Format(time.RFC3339Nano))
		}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	return q
}

// Redrive gives a dead or fatally failed task a second life: it runs again with a fresh attempt
// budget, and o's payload, priority or max_attempts if set. The API refuses with a *Error of
// status 409 a task that has not failed for good, one that other tasks wait for, or one whose
// deadline has passed.
func (c *Client) Redrive(ctx context.Context, lambda, id string, o task.RedriveOptions) (t task.Task, err error) {
	_, err = c.do(ctx, once, http.MethodPost, taskPath(lambda, id)+"/redrive", o, &t)
	return t, err
}

// RedrivePage redrives the failed tasks of one page of the list p describes (dead and
// fatal_failure unless p names one, p's collection and creation-time range), with o, and answers
// the counts and the cursor of the next page ("" at the end).
func (c *Client) RedrivePage(ctx context.Context, p task.ListParams, o task.RedriveOptions) (task.RedriveResult, error) {
	body := map[string]any{}
	if set := p.StatusSet(); len(set) > 0 {
		statuses := make([]string, len(set))
		for i, st := range set {
			statuses[i] = string(st)
		}
		body["status"] = strings.Join(statuses, ",")
	}
	for k, v := range map[string]string{"collection": p.Collection, "cursor": p.Cursor, "priority": o.Priority} {
		if v != "" {
			body[k] = v
		}
	}
	for k, v := range map[string]time.Time{"created_from": p.CreatedFrom, "created_to": p.CreatedTo} {
		if !v.IsZero() {
			body[k] = v
		}
	}
	for k, v := range map[string]int{"limit": p.Limit, "max_attempts": o.MaxAttempts} {
		if v > 0 {
			body[k] = v
		}
	}
	if o.Payload != nil {
		body["payload"] = o.Payload
	}
	var out struct {
		Redriven   int                `json:"redriven"`
		Skipped    int                `json:"skipped"`
		Skips      []task.RedriveSkip `json:"skips"`
		NextCursor string             `json:"next_cursor"`
	}
	_, err := c.do(ctx, once, http.MethodPost, "/v1/lambdas/"+url.PathEscape(p.Lambda)+"/tasks/redrive", body, &out)
	return task.RedriveResult{Redriven: out.Redriven, Skipped: out.Skipped, Skips: out.Skips, Next: out.NextCursor}, err
}

// RedriveAll redrives every failed task that p matches, a page per request, from p.Cursor to the
// end, calling progress (if not nil) with the running totals after each page. It returns the
// totals, the skips of every page included. On an error the totals say what was done: the
// cursor of the last page that completed is in their Next, to go on from.
func (c *Client) RedriveAll(ctx context.Context, p task.ListParams, o task.RedriveOptions, progress func(task.RedriveResult)) (task.RedriveResult, error) {
	var total task.RedriveResult
	for {
		r, err := c.RedrivePage(ctx, p, o)
		if err != nil {
			total.Next = p.Cursor
			return total, err
		}
		total.Redriven += r.Redriven
		total.Skipped += r.Skipped
		total.Skips = append(total.Skips, r.Skips...)
		total.Next = r.Next
		if progress != nil {
			progress(total)
		}
		if r.Next == "" {
			return total, nil
		}
		p.Cursor = r.Next
	}
}

// ListFailed returns a page of the tasks of every lambda that failed for good (p.Statuses, some
// of task.Failed, or both), the latest updated first, and the cursor of the next page, empty
// after the last: GET /v1/tasks. A page may come short of p.Limit, and still have a cursor, where
// the store's index still listed a task that was redriven meanwhile.
func (c *Client) ListFailed(ctx context.Context, p task.FailedParams) ([]task.Task, string, error) {
	q := url.Values{}
	var statuses []string
	for _, st := range p.Statuses {
		statuses = append(statuses, string(st))
	}
	if len(statuses) > 0 {
		q.Set("status", strings.Join(statuses, ","))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page struct {
		Tasks      []task.Task `json:"tasks"`
		NextCursor string      `json:"next_cursor"`
	}
	_, err := c.do(ctx, retry, http.MethodGet, "/v1/tasks?"+q.Encode(), nil, &page)
	return page.Tasks, page.NextCursor, err
}
