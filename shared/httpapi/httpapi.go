// Package httpapi serves the v1 HTTP API over a frontend.Service. Resource paths carry the lambda
// name, so on AWS an IAM policy can scope a client to its own lambdas.
//
//	POST /v1/lambdas/{lambda}/tasks               schedule: 201 new, 200 replay, 409 id reused
//	POST /v1/lambdas/{lambda}/tasks/batch         {"tasks":[...]}: up to 100 schedules, all or none
//	GET  /v1/lambdas/{lambda}/tasks/{id}          a task
//	GET  /v1/lambdas/{lambda}/tasks               list: ?status=&collection=&limit=&cursor=
//	POST /v1/lambdas/{lambda}/tasks/{id}/cancel   cancel a waiting task
//	PUT  /v1/lambdas/{lambda}/gate                {"mode":"open|pause|drop","collection":"..."}
//	GET  /v1/lambdas                              lambdas, gates and task counts
//
// Answers are compact JSON. Errors are {"error":{"code":"...","message":"..."}}; errors it does
// not know read "internal error" and are logged, never sent.
package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/openatf/atf/shared/frontend"
	"github.com/openatf/atf/shared/task"
)

// envelopeLimit is what a schedule body may carry on top of its payload.
const envelopeLimit = 16 << 10

// batchLimit bounds a batch body: the 6 MB a Lambda invocation's payload may hold, which the API
// function's event must fit in. Each task's payload is still held to the payload limit.
const batchLimit = 6 << 20

type api struct {
	svc *frontend.Service
	log *slog.Logger
	mux *http.ServeMux
}

// New returns the API handler.
func New(svc *frontend.Service, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	a := &api{svc: svc, log: log, mux: http.NewServeMux()}
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks", a.schedule)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks/batch", a.scheduleBatch)
	a.mux.HandleFunc("GET /v1/lambdas/{lambda}/tasks/{id}", a.get)
	a.mux.HandleFunc("GET /v1/lambdas/{lambda}/tasks", a.list)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/tasks/{id}/cancel", a.cancel)
	a.mux.HandleFunc("PUT /v1/lambdas/{lambda}/gate", a.gate)
	a.mux.HandleFunc("GET /v1/lambdas", a.lambdas)
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
		rec := httptest.NewRecorder()
		a.mux.ServeHTTP(rec, r)
		if allow := rec.Header().Get("Allow"); allow != "" {
			rw.Header().Set("Allow", allow)
		}
		writeError(rw, rec.Code, "no_route", fmt.Sprintf("no route for %s %s", task.Echo(r.Method), task.Echo(r.URL.Path)))
	} else {
		a.mux.ServeHTTP(rw, r)
	}
	a.log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", rw.status, "duration", time.Since(start))
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// scheduleRequest is the body of a schedule call.
type scheduleRequest struct {
	ID          string          `json:"id"`
	Payload     json.RawMessage `json:"payload"`
	RunAt       *time.Time      `json:"run_at"`
	Delay       *string         `json:"delay"`
	Priority    string          `json:"priority"`
	Collection  string          `json:"collection"`
	MaxAttempts int             `json:"max_attempts"`
	Deadline    *time.Time      `json:"deadline"`
	After       []string        `json:"after"`
}

// spec returns the task.Spec of a schedule request.
func (req scheduleRequest) spec() (task.Spec, error) {
	spec := task.Spec{
		ID: req.ID, Payload: req.Payload, RunAt: req.RunAt, Priority: req.Priority,
		Collection: req.Collection, MaxAttempts: req.MaxAttempts, Deadline: req.Deadline, After: req.After,
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
	if !a.decode(w, r, int64(a.svc.PayloadLimit())+envelopeLimit, &req) {
		return
	}
	spec, err := req.spec()
	if err != nil {
		a.fail(w, err)
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
		Tasks []scheduleRequest `json:"tasks"`
	}
	if !a.decode(w, r, batchLimit, &req) {
		return
	}
	specs := make([]task.Spec, len(req.Tasks))
	for i, tr := range req.Tasks {
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
	a.writeJSON(w, code, map[string]any{"tasks": tasks})
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	t, err := a.svc.Get(r.Context(), r.PathValue("lambda"), r.PathValue("id"))
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, t)
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := task.ListParams{
		Lambda: r.PathValue("lambda"), Status: task.Status(q.Get("status")),
		Collection: q.Get("collection"), Cursor: q.Get("cursor"),
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			a.fail(w, task.Errorf(task.ErrInvalid, "limit %q is not a number in 1..%d", task.Echo(s), task.MaxListLimit))
			return
		}
		p.Limit = n
	}
	tasks, next, err := a.svc.List(r.Context(), p)
	if err != nil {
		a.fail(w, err)
		return
	}
	if tasks == nil {
		tasks = []task.Task{}
	}
	a.writeJSON(w, http.StatusOK, map[string]any{"tasks": tasks, "next_cursor": next})
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

// The one table that maps domain errors to HTTP.
var errorCodes = []struct {
	kind   error
	status int
	code   string
}{
	{task.ErrNotFound, http.StatusNotFound, "not_found"},
	{task.ErrExists, http.StatusConflict, "conflict"},
	{task.ErrConflict, http.StatusConflict, "conflict"},
	{task.ErrStaleLease, http.StatusConflict, "stale_lease"},
	{task.ErrInvalid, http.StatusUnprocessableEntity, "invalid"},
	{task.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{task.ErrThrottled, http.StatusTooManyRequests, "throttled"},
}

func (a *api) fail(w http.ResponseWriter, err error) {
	for _, e := range errorCodes {
		if errors.Is(err, e.kind) {
			writeError(w, e.status, e.code, err.Error())
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
