// Package client is a Go client of the atf v1 HTTP API, used by the atf CLI.
//
// Public surface: a lambda owner imports task, worker and client (and workerfn in a Go handler's
// main); every other package under shared/ is the framework's own. See the README's Folders.
package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/openatf/atf/shared/task"
)

// Client calls one atf endpoint.
type Client struct {
	Endpoint string // such as http://127.0.0.1:8080
	HTTP     *http.Client
	Token    string // if set, sent as a bearer token, as atf dev --token requires
	// SigV4, if set, signs each request with its credentials and region for API Gateway, which
	// authorizes a deployed API's routes with IAM (SignSigV4), in place of Token.
	SigV4 *aws.Config
	// MaxWait is the wait each request of Wait asks for: DefaultMaxWait if zero. A server cuts a
	// longer wait to its own maximum.
	MaxWait time.Duration
}

// DefaultMaxWait is the longest wait the API gives one request (the server's frontend.MaxWait):
// on AWS, API Gateway ends a request after 29 s.
const DefaultMaxWait = 25 * time.Second

// Error is an error answer of the API.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Code) }

// ScheduleRequest is the body of a schedule call; see the API documentation for each field.
type ScheduleRequest struct {
	// Lambda is, in a batch, the task's lambda if not the batch's; a single schedule leaves it
	// empty.
	Lambda     string          `json:"lambda,omitempty"`
	ID         string          `json:"id,omitempty"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	RunAt      string          `json:"run_at,omitempty"`
	Delay      string          `json:"delay,omitempty"`
	Priority   string          `json:"priority,omitempty"`
	Collection string          `json:"collection,omitempty"`
	// Key is the task's tenant: a lambda's slots are shared fairly among the keys of its waiting
	// tasks. Letters, digits, '.', '_', ':' and '-', at most 128 characters; empty for none.
	Key         string `json:"key,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	Deadline    string `json:"deadline,omitempty"`
	// After names the tasks this one waits for, its upstreams, of any lambda; a Ref without a
	// Lambda names a task of this task's lambda. The task is pending until they have ended.
	After []task.Ref `json:"after,omitempty"`
	// TriggerRule says when the task runs after its upstreams: task.TriggerAllSuccess (the
	// default; an upstream that fails ends it upstream_failed) or task.TriggerAllDone.
	TriggerRule string `json:"trigger_rule,omitempty"`
}

// Schedule schedules a task; created is false when the call replayed an earlier one (or its own
// first try, sent again after a failed connection: see retry.go). A request without an ID gets
// one here, so that it is safe to send again.
func (c *Client) Schedule(ctx context.Context, lambda string, req ScheduleRequest) (t task.Task, created bool, err error) {
	if req.ID == "" {
		req.ID = task.NewID(time.Now())
	}
	code, err := c.do(ctx, retry, http.MethodPost, "/v1/lambdas/"+url.PathEscape(lambda)+"/tasks", req, &t)
	return t, code == http.StatusCreated, err
}

// ScheduleBatch schedules up to task.MaxBatch (100) tasks in one request, all or none; created is
// false when the call replayed an earlier one. The tasks are the lambda's, but for a request
// that names another; they may wait for each other, by id (see Graph).
func (c *Client) ScheduleBatch(ctx context.Context, lambda string, reqs []ScheduleRequest) (tasks []task.Task, created bool, err error) {
	var out struct {
		Tasks []task.Task `json:"tasks"`
	}
	reqs = slices.Clone(reqs)
	for i := range reqs {
		if reqs[i].ID == "" { // as Schedule does
			reqs[i].ID = task.NewID(time.Now())
		}
	}
	code, err := c.do(ctx, retry, http.MethodPost, "/v1/lambdas/"+url.PathEscape(lambda)+"/tasks/batch", map[string]any{"tasks": reqs}, &out)
	return out.Tasks, code == http.StatusCreated, err
}

// Get returns a task.
func (c *Client) Get(ctx context.Context, lambda, id string) (t task.Task, err error) {
	_, err = c.do(ctx, retry, http.MethodGet, taskPath(lambda, id), nil, &t)
	return t, err
}

// GetWait returns a task once it is terminal, or as it stands after wait, in one request. The
// server cuts a wait to its maximum (DefaultMaxWait), so the task may come back unfinished
// sooner: Wait goes on until it ends.
func (c *Client) GetWait(ctx context.Context, lambda, id string, wait time.Duration) (t task.Task, err error) {
	_, err = c.do(ctx, retry, http.MethodGet, taskPath(lambda, id)+"?wait="+url.QueryEscape(wait.String()), nil, &t)
	return t, err
}

// Wait returns a task once it is terminal (succeeded, failed for good, cancelled, ...): it asks
// again, each request waiting up to MaxWait, until then or until ctx ends.
func (c *Client) Wait(ctx context.Context, lambda, id string) (task.Task, error) {
	for {
		t, err := c.GetWait(ctx, lambda, id, cmp.Or(c.MaxWait, DefaultMaxWait))
		if err != nil || t.Status.Terminal() {
			return t, err
		}
		if err := ctx.Err(); err != nil {
			return t, err
		}
	}
}

// List returns a page of tasks and the cursor of the next one ("" at the end). A page reads a
// bounded part of the lambda's tasks, so with a filter it may hold fewer tasks than p.Limit, or
// none, and still have a cursor: go on until the cursor is empty, or use ListUpTo.
func (c *Client) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	q := listQuery(p)
	var page struct {
		Tasks      []task.Task `json:"tasks"`
		NextCursor string      `json:"next_cursor"`
	}
	_, err := c.do(ctx, retry, http.MethodGet, "/v1/lambdas/"+url.PathEscape(p.Lambda)+"/tasks?"+q.Encode(), nil, &page)
	return page.Tasks, page.NextCursor, err
}

// ListUpTo lists pages from p.Cursor on until it has p.Limit tasks (task.DefaultListLimit if
// zero), the cursor ends, or it has made maxPages calls (at least one), and returns the tasks and
// the cursor after them. It fills what a filtered list gives in short pages, at a bounded cost.
func (c *Client) ListUpTo(ctx context.Context, p task.ListParams, maxPages int) ([]task.Task, string, error) {
	want := p.Limit
	if want <= 0 {
		want = task.DefaultListLimit
	}
	var tasks []task.Task
	for range max(maxPages, 1) {
		p.Limit = want - len(tasks)
		page, next, err := c.List(ctx, p)
		if err != nil {
			return nil, "", err
		}
		tasks = append(tasks, page...)
		if p.Cursor = next; next == "" || len(tasks) >= want {
			break
		}
	}
	return tasks, p.Cursor, nil
}

// Cancel cancels a task: a waiting one ends cancelled; a running one comes back marked
// (CancelRequested) and ends cancelled once its executor has stopped it.
func (c *Client) Cancel(ctx context.Context, lambda, id string) (t task.Task, err error) {
	_, err = c.do(ctx, once, http.MethodPost, taskPath(lambda, id)+"/cancel", nil, &t)
	return t, err
}

// AddUpstreams makes a task that has not started wait for more tasks, atomically, and returns it
// pending. The API refuses, with a *Error of status 422, an upstream that does not exist or one
// that would close a cycle, and with 409 a task that has started.
func (c *Client) AddUpstreams(ctx context.Context, lambda, id string, after []task.Ref) (t task.Task, err error) {
	_, err = c.do(ctx, once, http.MethodPost, taskPath(lambda, id)+"/after", map[string]any{"after": after}, &t)
	return t, err
}

// Downstream is a task that waits for another, with its status, as Downstreams lists it.
type Downstream struct {
	Lambda string      `json:"lambda"`
	ID     string      `json:"id"`
	Status task.Status `json:"status"`
}

// Ref is the task's name.
func (d Downstream) Ref() task.Ref { return task.Ref{Lambda: d.Lambda, ID: d.ID} }

// Downstreams returns a page of the tasks that wait for a task, at most limit (the API's default
// if zero), and the cursor of the next page ("" at the end).
func (c *Client) Downstreams(ctx context.Context, lambda, id, cursor string, limit int) ([]Downstream, string, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page struct {
		Downstreams []Downstream `json:"downstreams"`
		NextCursor  string       `json:"next_cursor"`
	}
	_, err := c.do(ctx, retry, http.MethodGet, taskPath(lambda, id)+"/downstreams?"+q.Encode(), nil, &page)
	return page.Downstreams, page.NextCursor, err
}

// Attempts returns a task's history: its latest attempts (task.MaxHistory), oldest first, and
// how many before them are not kept.
func (c *Client) Attempts(ctx context.Context, lambda, id string) (task.History, error) {
	var h task.History
	_, err := c.do(ctx, retry, http.MethodGet, taskPath(lambda, id)+"/attempts", nil, &h)
	return h, err
}

// AttemptLog returns a task's attempt number n from its history, or its latest ended attempt if
// n is 0, with its log (task.Attempt.Log): kept by atf dev, empty on AWS.
func (c *Client) AttemptLog(ctx context.Context, lambda, id string, n int) (task.Attempt, error) {
	h, err := c.Attempts(ctx, lambda, id)
	if err != nil {
		return task.Attempt{}, err
	}
	if len(h.Attempts) == 0 {
		return task.Attempt{}, fmt.Errorf("task %s of lambda %s has no ended attempt yet", id, lambda)
	}
	if n == 0 {
		return h.Attempts[len(h.Attempts)-1], nil
	}
	for _, a := range h.Attempts {
		if a.Number == n {
			return a, nil
		}
	}
	first, last := h.Attempts[0].Number, h.Attempts[len(h.Attempts)-1].Number
	return task.Attempt{}, fmt.Errorf("task %s of lambda %s keeps no attempt %d: it keeps attempts %d to %d", id, lambda, n, first, last)
}

// SetGate sets a lambda's gate, or a collection's when collection is not empty.
func (c *Client) SetGate(ctx context.Context, lambda, collection, mode string) (g task.Gate, err error) {
	body := map[string]string{"mode": mode}
	if collection != "" {
		body["collection"] = collection
	}
	_, err = c.do(ctx, retry, http.MethodPut, "/v1/lambdas/"+url.PathEscape(lambda)+"/gate", body, &g)
	return g, err
}

// Lambdas lists the lambdas with their gates and task counts.
func (c *Client) Lambdas(ctx context.Context) ([]task.LambdaInfo, error) {
	var out struct {
		Lambdas []task.LambdaInfo `json:"lambdas"`
	}
	_, err := c.do(ctx, retry, http.MethodGet, "/v1/lambdas", nil, &out)
	return out.Lambdas, err
}

func taskPath(lambda, id string) string {
	return "/v1/lambdas/" + url.PathEscape(lambda) + "/tasks/" + url.PathEscape(id)
}

// idempotent says that a request may be sent again: see retry.go.
type idempotent bool

const (
	once  idempotent = false
	retry idempotent = true
)

// do sends a request, again while it is safe and worth it (see retry.go), and decodes its answer
// into out. It returns the status of the last answer.
func (c *Client) do(ctx context.Context, safe idempotent, method, path string, body, out any) (int, error) {
	status, _, err := c.send(ctx, safe, method, path, body, out)
	return status, err
}

// send is do that also says how many times it sent the request.
func (c *Client) send(ctx context.Context, safe idempotent, method, path string, body, out any) (status, tries int, err error) {
	var b []byte
	if body != nil {
		if b, err = json.Marshal(body); err != nil {
			return 0, 0, err
		}
	}
	for n := 1; ; n++ {
		status, retryAfter, err := c.try(ctx, method, path, b, body != nil, out)
		if safe == once || n == MaxAttempts || !retryable(status, err) {
			return status, n, err
		}
		if serr := sleep(ctx, backoff(n, retryAfter)); serr != nil {
			return status, n, err
		}
	}
}

// try sends a request once. It returns the answer's status (0 without one) and Retry-After.
func (c *Client) try(ctx context.Context, method, path string, body []byte, hasBody bool, out any) (int, string, error) {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Endpoint+path, rd)
	if err != nil {
		return 0, "", err
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	switch {
	case c.SigV4 != nil: // the signature is the Authorization header: no token goes with it
		if err := SignSigV4(ctx, c.SigV4, req, body, time.Now()); err != nil {
			return 0, "", notSigned{err}
		}
	case c.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	if c.SigV4 != nil {
		hc = notFollowing(hc)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err // the answer was cut: as good as none
	}
	retryAfter := resp.Header.Get("Retry-After")
	if resp.StatusCode >= 300 {
		if e, ok := GatewayRefusal(resp.StatusCode, method, path, data); ok {
			return resp.StatusCode, retryAfter, e
		}
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error.Message == "" {
			return resp.StatusCode, retryAfter, &Error{Status: resp.StatusCode, Code: "http", Message: resp.Status}
		}
		return resp.StatusCode, retryAfter, &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	if out == nil { // an answer without a body (204)
		return resp.StatusCode, retryAfter, nil
	}
	return resp.StatusCode, retryAfter, json.Unmarshal(data, out)
}
