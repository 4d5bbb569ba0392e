// Package httpapi serves the v1 HTTP API over a frontend.Service. Resource paths carry the lambda
// name, so on AWS an IAM policy can scope a client to its own lambdas.
//
//	POST /v1/lambdas/{lambda}/tasks               schedule: 201 new, 200 replay, 409 id reused
//	POST /v1/lambdas/{lambda}/tasks/batch         {"tasks":[...]}: up to 100 schedules, all or none;
//	                                              answers the tasks without their payload fields
//	GET  /v1/lambdas/{lambda}/tasks/{id}          a task; ?wait=25s: once it ends, or as it
//	                                              stands after the wait (at most 25 s)
//	GET  /v1/lambdas/{lambda}/tasks/{id}/attempts a task's latest 20 attempts: start, end,
//	                                              outcome, error, duration, worker and log each
//	                                              (or where the log is in CloudWatch)
//	GET  /v1/lambdas/{lambda}/tasks               list: ?status=&collection=&limit=&cursor=
//	POST /v1/lambdas/{lambda}/tasks/{id}/cancel   cancel a task: a waiting one ends cancelled, a
//	                                              running one is marked (cancel_requested) and
//	                                              ends cancelled once its executor stops it
//	POST /v1/lambdas/{lambda}/tasks/cancel        {"collection","status","limit","cursor"}: cancel
//	                                              a page of the tasks matched (at most 100); the
//	                                              counts and the next_cursor to go on
//	POST /v1/lambdas/{lambda}/tasks/{id}/redrive  a dead or fatally failed task runs again:
//	                                              {"payload","priority","max_attempts"}, all optional
//	POST /v1/lambdas/{lambda}/tasks/redrive       the same for a page of failed tasks: a list's
//	                                              filters and cursor; answers counts and a cursor
//	PUT  /v1/lambdas/{lambda}/gate                {"mode":"open|pause|drop","collection":"..."}
//	GET  /v1/lambdas                              lambdas, gates and task counts
//	GET  /v1/tasks?status=dead,fatal_failure      the tasks of every lambda that failed for good,
//	                                              latest updated first: ?status=&limit=&cursor=
//	     /v1/lambdas/{lambda}/schedules            periodic schedules (see schedule.go)
//	GET  /v1/lambdas/{lambda}/events              the live feed of lifecycle events, atf dev only
//	                                              (see events.go)
//	GET  /v1/openapi.json                         this API's OpenAPI 3.1 contract (openapi.json)
//
// Answers are compact JSON. Errors are {"error":{"code":"...","message":"..."}}; errors it does
// not know read "internal error" and are logged, never sent. A request the store does not serve
// within its budget (DefaultStoreBudget on top of its wait) answers 503 store_unavailable with a
// Retry-After.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/task"
)

// envelopeLimit is what a schedule body may carry on top of its payload.
const envelopeLimit = 16 << 10

// BatchBodyLimit bounds a batch body, on every path alike, so that the API function's event
// always fits the 6 MB (6 MiB) a Lambda invocation's payload may hold. API Gateway puts the body
// in the event as a JSON string, and escaping at most doubles a JSON text: only '"', '\' and
// the whitespace \t, \n and \r need an escape, of 2 bytes (a body that is not UTF-8 is no JSON,
// and its base64 is 4/3 of it). eventOverhead is left for the rest of the event: the headers,
// twice (API Gateway caps them at 10 KiB), the path, the request context. So a batch holds about
// 3 MiB of payloads; each is still held to the payload limit.
const BatchBodyLimit = (lambdaInvokeLimit - eventOverhead) / 2

const (
	// lambdaInvokeLimit is Lambda's limit on a synchronous invocation's request and response:
	// "6 MB each", https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html.
	lambdaInvokeLimit = 6 << 20
	eventOverhead     = 64 << 10
)

// DefaultStoreBudget is how long a request may spend on the store, on top of the wait it asks
// for: past it, the request answers 503 store_unavailable. It is well under API Gateway's 29 s
// integration timeout and a client's usual 30 s, and above the SDK's retries of a call that fails
// at once (dynamostore.MaxAttempts tries, at most 7 s of backoff between them), so a brief fault
// is retried before the request gives up. docs/guarantees.md argues it.
const DefaultStoreBudget = 10 * time.Second

// retryAfterUnavailable is the Retry-After of a 503 store_unavailable, in seconds.
const retryAfterUnavailable = "2"

type api struct {
	svc    *frontend.Service
	log    *slog.Logger
	mux    *routes
	budget time.Duration
}

// Option configures the handler New returns.
type Option func(*api)

// WithStoreBudget sets the store budget of every request (DefaultStoreBudget if not given).
func WithStoreBudget(d time.Duration) Option { return func(a *api) { a.budget = d } }

// New returns the API handler.
func New(svc *frontend.Service, log *slog.Logger, opts ...Option) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	a := &api{svc: svc, log: log, mux: &routes{ServeMux: http.NewServeMux()}, budget: DefaultStoreBudget}
	for _, o := range opts {
		o(a)
	}
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks", a.schedule)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks/batch", a.scheduleBatch)
	a.mux.HandleFunc("GET /v1/lambdas/{lambda}/tasks/{id}", a.get)
	a.mux.HandleFunc("GET /v1/lambdas/{lambda}/tasks", a.list)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks/{id}/cancel", a.cancel)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks/cancel", a.cancelMatching)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks/{id}/redrive", a.redrive)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks/redrive", a.redriveMatching)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks/{id}/after", a.addUpstreams)
	a.mux.HandleFunc("GET /v1/lambdas/{lambda}/tasks/{id}/downstreams", a.downstreams)
	a.mux.HandleFunc("GET /v1/lambdas/{lambda}/tasks/{id}/attempts", a.attempts)
	a.mux.HandleFunc("PUT /v1/lambdas/{lambda}/gate", a.gate)
	a.mux.HandleFunc("GET /v1/lambdas", a.lambdas)
	a.mux.HandleFunc("GET /v1/tasks", a.listFailed)
	a.routeSchedules()
	a.routeEvents()
	a.mux.HandleFunc("GET /v1/openapi.json", a.openAPI)
	return a
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &statusWriter{ResponseWriter: w}
	if r.URL.Path != path.Clean(r.URL.Path) {
		// ServeMux would redirect to the clean path; an API answers in its own format instead.
		writeError(rw, http.StatusNotFound, "no_route", fmt.Sprintf("no route for %s %s: the path is not clean", task.Echo(r.Method), task.Echo(r.URL.Path)))
	} else if _, pattern := a.mux.Handler(r); pattern == "" {
		// No route: keep the mux's verdict (404 or 405) but answer in the API's error format.
		v := &verdict{header: http.Header{}, code: http.StatusOK}
		a.mux.ServeHTTP(v, r)
		if allow := v.header.Get("Allow"); allow != "" {
			rw.Header().Set("Allow", allow)
		}
		writeError(rw, v.code, "no_route", fmt.Sprintf("no route for %s %s", task.Echo(r.Method), task.Echo(r.URL.Path)))
	} else if !jsonBody(r) {
		writeError(rw, http.StatusUnsupportedMediaType, "unsupported_media_type", "request bodies must be application/json")
	} else {
		// Every request has a deadline: a store that hangs is answered 503, not waited on.
		ctx, cancel := context.WithTimeout(r.Context(), a.budget+a.waitOf(r))
		defer cancel()
		a.mux.ServeHTTP(rw, r.WithContext(ctx))
	}
	a.log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", rw.status, "duration", time.Since(start))
}

// waitOf returns the wait a request asks for (?wait= of a task or of the events feed), cut to
// the longest the service gives; its store budget comes on top.
func (a *api) waitOf(r *http.Request) time.Duration {
	if r.Method != http.MethodGet || !r.URL.Query().Has("wait") {
		return 0
	}
	d, err := time.ParseDuration(r.URL.Query().Get("wait"))
	if err != nil || d < 0 {
		return 0 // the handler answers it 400
	}
	return min(d, a.svc.MaxWait())
}

// verdict keeps the status and headers of the mux's own answer to a request without a route, and
// drops its body: the API answers such a request in its own error format.
type verdict struct {
	header      http.Header
	code        int
	wroteHeader bool
}

func (v *verdict) Header() http.Header { return v.header }

func (v *verdict) WriteHeader(code int) {
	if !v.wroteHeader {
		v.code, v.wroteHeader = code, true
	}
}

func (v *verdict) Write(b []byte) (int, error) {
	v.WriteHeader(http.StatusOK)
	return len(b), nil
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// scheduleRequest is the body of a schedule call.
type scheduleRequest struct {
	Lambda      string          `json:"lambda"` // in a batch: the task's lambda, if not the path's
	ID          string          `json:"id"`
	Payload     json.RawMessage `json:"payload"`
	RunAt       *time.Time      `json:"run_at"`
	Delay       *string         `json:"delay"`
	Priority    string          `json:"priority"`
	Collection  string          `json:"collection"`
	Key         string          `json:"key"`
	MaxAttempts int             `json:"max_attempts"`
	Deadline    *time.Time      `json:"deadline"`
	After       []task.Ref      `json:"after"`
	Trigger     string          `json:"trigger_rule"`
}

// spec returns the task.Spec of a schedule request.
func (req scheduleRequest) spec() (task.Spec, error) {
	spec := task.Spec{
		Lambda: req.Lambda, ID: req.ID, Payload: req.Payload, RunAt: req.RunAt, Priority: req.Priority,
		Collection: req.Collection, Key: req.Key, MaxAttempts: req.MaxAttempts, Deadline: req.Deadline, After: req.After,
		Trigger: req.Trigger,
	}
	if req.Delay != nil {
		d, err := time.ParseDuration(*req.Delay)
		if err != nil {
			return spec, task.Errorf(task.ErrInvalid, "delay %q is not a duration such as \"90s\" or \"5m\"", task.Echo(*req.Delay))
		}
		spec.Delay = &d
	}
	if string(req.Payload) == "null" {
		spec.Payload = nil
	}
	return spec, nil
}

func (a *api) schedule(w http.ResponseWriter, r *http.Request) {
	var req scheduleRequest
	// A single task's body holds its payload and up to task.MaxAfter upstreams.
	if !a.decode(w, r, max(int64(a.svc.PayloadLimit())+envelopeLimit, BatchBodyLimit), &req) {
		return
	}
	spec, err := req.spec()
	if err != nil {
		a.fail(w, err)
		return
	}
	if spec.Lambda != "" && spec.Lambda != r.PathValue("lambda") {
		a.fail(w, task.Errorf(task.ErrInvalid, "lambda %q differs from the path's; it is for tasks of a batch", task.Echo(spec.Lambda)))
		return
	}
	t, created, err := a.svc.Schedule(r.Context(), r.PathValue("lambda"), spec)
	if err != nil {
		a.fail(w, err)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		w.Header().Set("Location", "/v1/lambdas/"+t.Lambda+"/tasks/"+t.ID)
	}
	a.writeJSON(w, code, t)
}

// scheduleBatch answers 201 with every task created, or 200 with the stored tasks when the same
// batch was sent before.
func (a *api) scheduleBatch(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tasks []*scheduleRequest `json:"tasks"`
	}
	if !a.decode(w, r, BatchBodyLimit, &req) {
		return
	}
	specs := make([]task.Spec, len(req.Tasks))
	for i, tr := range req.Tasks {
		if tr == nil { // decoding would make a null task one of defaults
			a.fail(w, task.Errorf(task.ErrInvalid, "tasks[%d] is null, not a task", i))
			return
		}
		var err error
		if specs[i], err = tr.spec(); err != nil {
			a.fail(w, fmt.Errorf("tasks[%d]: %w", i, err))
			return
		}
	}
	tasks, created, err := a.svc.ScheduleBatch(r.Context(), r.PathValue("lambda"), specs)
	if err != nil {
		a.fail(w, err)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	answer := make([]batchTask, len(tasks))
	for i, t := range tasks {
		answer[i] = batchTask{Task: t}
	}
	a.writeJSON(w, code, map[string]any{"tasks": answer})
}

// batchTask is a task of a batch's answer, which has no payload field. The caller sent the
// payloads. Echoed, they would make the answer up to 7 times the body (a '<' is sent as \u003c,
// then escaped again into the function's response), past Lambda's response limit once the tasks
// exist: the client would see a 502 on every retry. Answered null, they would read as none.
type batchTask struct {
	task.Task
	Payload json.RawMessage `json:"payload,omitempty"` // always nil: hides the task's own
}

// addUpstreams makes a task that has not started wait for more upstreams: {"after": [...]}.
func (a *api) addUpstreams(w http.ResponseWriter, r *http.Request) {
	var req struct {
		After []task.Ref `json:"after"`
	}
	if !a.decode(w, r, BatchBodyLimit, &req) {
		return
	}
	t, err := a.svc.AddUpstreams(r.Context(), r.PathValue("lambda"), r.PathValue("id"), req.After)
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, t)
}

// Downstream is a task that waits for another, as the downstreams endpoint lists it.
type Downstream struct {
	Lambda string      `json:"lambda"`
	ID     string      `json:"id"`
	Status task.Status `json:"status"`
}

// downstreams answers a page of the tasks that wait for a task: {"downstreams": [...],
// "next_cursor": "..."}. It lists their names and statuses, not the tasks, so that a page's size
// is bounded by its limit.
func (a *api) downstreams(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			a.fail(w, task.Errorf(task.ErrInvalid, "limit %q is not a number in 1..%d", task.Echo(s), task.MaxListLimit))
			return
		}
		limit = n
	}
	tasks, next, err := a.svc.Downstreams(r.Context(), r.PathValue("lambda"), r.PathValue("id"), q.Get("cursor"), limit)
	if err != nil {
		a.fail(w, err)
		return
	}
	out := make([]Downstream, len(tasks))
	for i, t := range tasks {
		out[i] = Downstream{Lambda: t.Lambda, ID: t.ID, Status: t.Status}
	}
	a.writeJSON(w, http.StatusOK, map[string]any{"downstreams": out, "next_cursor": next})
}

// attempts answers a task's history: {"attempts": [...], "attempts_dropped": N}, oldest first.
func (a *api) attempts(w http.ResponseWriter, r *http.Request) {
	h, err := a.svc.Attempts(r.Context(), r.PathValue("lambda"), r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, h)
}

// get answers a task. With ?wait=DURATION ("25s") it first waits until the task is terminal or
// the wait is over, and answers the task as it stands either way; a wait past
// frontend.MaxWait is cut to it, so a client that loops on non-terminal answers may ask for
// more than the server gives.
func (a *api) get(w http.ResponseWriter, r *http.Request) {
	lambda, id := r.PathValue("lambda"), r.PathValue("id")
	var t task.Task
	var err error
	if q := r.URL.Query(); q.Has("wait") {
		d, perr := time.ParseDuration(q.Get("wait"))
		if perr != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "malformed", fmt.Sprintf("wait %q is not a duration such as \"25s\" (at most %s)", task.Echo(q.Get("wait")), a.svc.MaxWait()))
			return
		}
		t, err = a.svc.Wait(r.Context(), lambda, id, d)
	} else {
		t, err = a.svc.Get(r.Context(), lambda, id)
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, t)
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := task.ListParams{
		Lambda: r.PathValue("lambda"), Collection: q.Get("collection"), Cursor: q.Get("cursor"),
	}
	if err := listFilters(q, &p); err != nil {
		a.fail(w, err)
		return
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
		return a.svc.List(r.Context(), p)
	})
}

// limitOf reads a list's limit: 0 if absent, for the default.
func limitOf(q url.Values) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, task.Errorf(task.ErrInvalid, "limit %q is not a number in 1..%d", task.Echo(s), task.MaxListLimit)
	}
	return n, nil
}

// writePage answers a page of tasks that list reads: list(0) is the page asked for, and
// list(n) the same page cut to n tasks, with the cursor after them.
func (a *api) writePage(w http.ResponseWriter, list func(limit int) ([]task.Task, string, error)) {
	tasks, next, err := list(0)
	for refits := 0; err == nil; refits++ {
		var encoded [][]byte
		if encoded, err = encodeTasks(tasks); err != nil {
			break
		}
		fit := len(encoded)
		if fit == len(tasks) {
			writeListPage(w, encoded, next)
			return
		}
		// Over the byte budget: ask again for the tasks that fit, so that the store gives the
		// cursor after the last of them. The page it gives is the same or a prefix, unless tasks
		// changed meanwhile; then try again, and at last take a single task, which always fits.
		if refits == maxListRefits {
			fit = 1
		}
		tasks, next, err = list(fit)
	}
	a.fail(w, err)
}

// ListPageBytes bounds the body of a list page. On AWS the API function's response must fit the
// 6 MiB Lambda allows, and the body goes into it as a JSON string, which escaping at most doubles
// (see BatchBodyLimit); 2 MiB leaves room for the rest. A page stops before the task that would
// take it past the budget, with a cursor after the last task it holds. A page always holds one
// task if one matches, even over the budget: a task is at most about 3 MiB of JSON, its payload
// and result at the payload limit with every byte a '<' sent as \u003c.
const ListPageBytes = 2 << 20

// maxListRefits bounds how often a list page is asked for again to fit ListPageBytes.
const maxListRefits = 2

// listEnvelope is what a list page's body holds besides its tasks, its cursor included (at most a
// few hundred bytes).
const listEnvelope = 1 << 10

// encodeTasks encodes tasks as JSON for a list page, in order, until the next would take the page
// past ListPageBytes: all of them, or at least one.
func encodeTasks(tasks []task.Task) ([][]byte, error) {
	encoded := make([][]byte, 0, len(tasks))
	size := listEnvelope
	for _, t := range tasks {
		b, err := encode(t)
		if err != nil {
			return nil, fmt.Errorf("encode task %s: %w", t.ID, err)
		}
		b = bytes.TrimSuffix(b, []byte("\n"))
		if size += len(b) + 1; size > ListPageBytes && len(encoded) > 0 {
			break
		}
		encoded = append(encoded, b)
	}
	return encoded, nil
}

// writeListPage answers {"tasks":[...],"next_cursor":"..."} from encoded tasks.
func writeListPage(w http.ResponseWriter, tasks [][]byte, next string) {
	cursor, _ := encode(next)
	var body bytes.Buffer
	body.WriteString(`{"tasks":[`)
	for i, b := range tasks {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(b)
	}
	body.WriteString(`],"next_cursor":`)
	body.Write(bytes.TrimSuffix(cursor, []byte("\n")))
	body.WriteString("}\n")
	write(w, http.StatusOK, body.Bytes())
}

func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	t, err := a.svc.Cancel(r.Context(), r.PathValue("lambda"), r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, t)
}

func (a *api) gate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Mode       string `json:"mode"`
		Collection string `json:"collection"`
	}
	if !a.decode(w, r, envelopeLimit, &req) {
		return
	}
	g, err := a.svc.SetGate(r.Context(), task.Gate{Lambda: r.PathValue("lambda"), Collection: req.Collection, Mode: req.Mode})
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, g)
}

func (a *api) lambdas(w http.ResponseWriter, r *http.Request) {
	ls, err := a.svc.Lambdas(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, map[string]any{"lambdas": ls})
}

// decode reads a JSON body of at most limit bytes into v, answering the error itself if it can't.
// The body must be valid UTF-8: decoding would replace bad bytes in strings, but a payload is kept
// as raw bytes and would be served back raw, as invalid JSON.
func (a *api) decode(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil && !utf8.Valid(body) {
		writeError(w, http.StatusBadRequest, "malformed", fmt.Sprintf("request body is not valid UTF-8 (offset %d)", invalidUTF8At(body)))
		return false
	}
	if err == nil && string(bytes.TrimSpace(body)) == "null" {
		// Decoding null into a request leaves it as it was, as if the body were {}: a body is an
		// object, as the contract says.
		writeError(w, http.StatusBadRequest, "malformed", "request body must be a JSON object, not null")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err == nil {
		err = dec.Decode(v)
	}
	if err == nil {
		// Anything after the value, even a stray ']' (which More does not see), is malformed.
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("more than one JSON value")
		}
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var parseTime *time.ParseError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The listener's read timeout cut a body that came too slowly.
		writeError(w, http.StatusRequestTimeout, "timeout", "the request body did not arrive in time")
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body is over the %d-byte limit", limit))
	case errors.As(err, &syntax):
		writeError(w, http.StatusBadRequest, "malformed", fmt.Sprintf("request body is not valid JSON (offset %d)", syntax.Offset))
	case errors.As(err, &typ):
		writeError(w, http.StatusBadRequest, "malformed", fmt.Sprintf("field %q must be a JSON %s", task.Echo(typ.Field), typ.Type))
	case errors.As(err, &parseTime):
		writeError(w, http.StatusBadRequest, "malformed", fmt.Sprintf("time %q is not RFC 3339, such as \"2026-01-02T15:04:05Z\"", task.Echo(parseTime.Value)))
	default:
		// Unknown fields, an empty body, trailing data: all the client's to fix.
		writeError(w, http.StatusBadRequest, "malformed", "request body: "+task.Echo(err.Error()))
	}
	return false
}

// statusClientClosed answers a request whose client went away (nginx's 499): nobody reads it, and
// it is no fault of the server, so it is not logged as one.
const statusClientClosed = 499

// The one table that maps domain errors to HTTP. Errors the client may retry as they are, once
// the store has caught up, has room again or answers again, carry a Retry-After in seconds. An
// error with a message of its own is answered that message, and logged as a warning: its text
// names internals (an endpoint, a socket) that are not the caller's business.
var errorCodes = []struct {
	kind       error
	status     int
	code       string
	retryAfter string
	message    string
}{
	{task.ErrNotFound, http.StatusNotFound, "not_found", "", ""},
	{task.ErrExists, http.StatusConflict, "conflict", "", ""},
	{task.ErrConflict, http.StatusConflict, "conflict", "", ""},
	{task.ErrStaleLease, http.StatusConflict, "stale_lease", "", ""},
	{task.ErrPrecondition, http.StatusPreconditionFailed, "precondition_failed", "", ""},
	{task.ErrInvalid, http.StatusUnprocessableEntity, "invalid", "", ""},
	{task.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large", "", ""},
	{task.ErrThrottled, http.StatusTooManyRequests, "throttled", "1", ""},
	{task.ErrStorageFull, http.StatusInsufficientStorage, "storage_full", "10", ""},
	{task.ErrUnavailable, http.StatusServiceUnavailable, "store_unavailable", retryAfterUnavailable, "the task store is unavailable; retry later"},
	// The request's store budget ran out: the store hangs, or is too slow to be of use.
	{context.DeadlineExceeded, http.StatusServiceUnavailable, "store_unavailable", retryAfterUnavailable, "the task store did not answer in time; retry later"},
}

func (a *api) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, context.Canceled) {
		// The request's context ends when its client goes away.
		writeError(w, statusClientClosed, "client_closed", "the client went away")
		return
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.kind) {
			if e.retryAfter != "" {
				w.Header().Set("Retry-After", e.retryAfter)
			}
			msg := err.Error()
			if e.message != "" {
				a.log.Warn(e.code, "err", err)
				msg = e.message
			}
			writeError(w, e.status, e.code, msg)
			return
		}
	}
	a.log.Error("internal error", "err", err)
	writeError(w, http.StatusInternalServerError, "internal", "internal error")
}

// invalidUTF8At returns the offset of the first byte of b that is not valid UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := encode(map[string]any{"error": map[string]string{"code": code, "message": msg}}) // strings always encode
	write(w, status, body)
}

// writeJSON answers v. A task that does not encode (a store returned bytes that are not JSON)
// is a server fault.
func (a *api) writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := encode(v)
	if err != nil {
		a.fail(w, fmt.Errorf("encode the answer: %w", err))
		return
	}
	write(w, status, body)
}

// encode returns v as compact JSON, one line. Indented JSON grows with the square of its nesting,
// so answers are compact and a client indents them if it likes (atf --json does). HTML is not
// escaped: an answer is application/json, never HTML (and nosniff keeps browsers from guessing
// otherwise), and unescaped, a stored payload is answered at its stored size rather than up to
// six times it ("<" as "\u003c").
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return b.Bytes(), err
}

func write(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)
}
