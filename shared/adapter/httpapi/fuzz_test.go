package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// FuzzRequestBody sends arbitrary bodies to the schedule endpoint (gate false) and to the gate
// endpoint (gate true) through the real handler over the embedded store. Each input gets a lambda
// of its own, so inputs never see each other's tasks or gates. Whatever the body:
//   - the answer is never a 5xx, and its body is one JSON value, served as application/json;
//   - a 4xx is {"error":{"code","message"}} with the code of its status, and the lambda still has
//     no task and no gate;
//   - a schedule that succeeds is a 201 whose task is what the body asked for, as stored, and the
//     same body again (with an id) is a 200 replay that changes nothing;
//   - a gate that succeeds is a 200 with the mode and collection asked for, as stored.
func FuzzRequestBody(f *testing.F) {
	for _, body := range []string{
		`{}`,
		`{"id":"a-1","payload":{"hi":"there"},"delay":"90s","priority":"high","collection":"c.1"}`,
		`{"payload":null,"run_at":"2000-01-01T00:00:00Z","max_attempts":3}`,
		`{"run_at":"2026-11-23T01:00:00+05:30","deadline":"9999-12-31T23:59:59Z"}`,
		`{"delay":"-5s"}`,
		`{"delay":"1h","run_at":"2030-01-01T00:00:00Z"}`,
		`{"max_attempts":"3"}`,
		`{"payload":`,
		`{"after":["x"]}`,
		`{"id":"a"}]`, // a value, then a stray bracket: malformed
	} {
		f.Add(false, []byte(body))
	}
	f.Add(true, []byte(`{"mode":"pause","collection":"marketing"}`))
	f.Add(true, []byte(`{"mode":"shut"}`))
	// Over the payload limit (1 KiB here), and over the body limit (16 KiB more).
	f.Add(false, []byte(`{"payload":"`+strings.Repeat("x", 1<<10)+`"}`))
	f.Add(false, []byte(`{"payload":"`+strings.Repeat("x", 17<<10)+`"}`))

	store, err := sqlitestore.Open(filepath.Join(f.TempDir(), "atf.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	// A small payload limit, so that inputs over it stay small.
	cfg := task.Config{PayloadLimit: 1 << 10}.WithDefaults()
	quiet := slog.New(slog.DiscardHandler)
	var n atomic.Int64

	f.Fuzz(func(t *testing.T, gate bool, body []byte) {
		lambda := fmt.Sprintf("fuzz-%d", n.Add(1))
		svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: lambda}.WithDefaults()}, Task: cfg})
		h := checked(t, httpapi.New(svc, quiet))
		method, path := http.MethodPost, "/v1/lambdas/"+lambda+"/tasks"
		if gate {
			method, path = http.MethodPut, "/v1/lambdas/"+lambda+"/gate"
		}
		before := time.Now()
		rec := serve(h, method, path, body)
		after := time.Now()

		checkJSON(t, rec)
		if rec.Code >= 400 {
			checkError(t, rec)
			checkUntouched(t, store, lambda)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("%d for a body that is not JSON", rec.Code)
		}
		if gate {
			checkGate(t, store, lambda, body, rec, before, after)
		} else {
			checkScheduled(t, store, h, lambda, body, rec, before, after, cfg)
		}
	})
}

func serve(h http.Handler, method, path string, body []byte) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	return rec
}

// checkJSON: no 5xx, and the body is one JSON value served as JSON.
func checkJSON(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("status %d with content type %q", rec.Code, ct)
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("status %d with a body that is not JSON: %q", rec.Code, rec.Body)
	}
}

// The error code of each client error status (httpapi's table, as the README documents it).
var errorCodeOf = map[int]string{400: "malformed", 404: "not_found", 409: "conflict", 413: "too_large", 415: "unsupported_media_type", 422: "invalid", 429: "throttled"}

func checkError(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	var out struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("status %d: the body is not an error object: %v", rec.Code, err)
	}
	if want, ok := errorCodeOf[rec.Code]; !ok || out.Error.Code != want || out.Error.Message == "" {
		t.Fatalf("status %d answered with code %q, message %q", rec.Code, out.Error.Code, out.Error.Message)
	}
}

// checkUntouched: the input's lambda has no task and no gate.
func checkUntouched(t *testing.T, store task.Store, lambda string) {
	t.Helper()
	ctx := context.Background()
	counts, err := store.Counts(ctx, lambda)
	if err != nil || len(counts) != 0 {
		t.Fatalf("a refused request left tasks: %v, %v", counts, err)
	}
	gates, err := store.Gates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gates {
		if g.Lambda == lambda {
			t.Fatalf("a refused request left a gate: %+v", g)
		}
	}
}

// scheduleBody mirrors the documented schedule body.
type scheduleBody struct {
	ID          string          `json:"id"`
	Payload     json.RawMessage `json:"payload"`
	RunAt       *time.Time      `json:"run_at"`
	Delay       *string         `json:"delay"`
	Priority    string          `json:"priority"`
	Collection  string          `json:"collection"`
	MaxAttempts int             `json:"max_attempts"`
	Deadline    *time.Time      `json:"deadline"`
	After       []task.Ref      `json:"after"`
}

func checkScheduled(t *testing.T, store task.Store, h http.Handler, lambda string, body []byte, rec *httptest.ResponseRecorder, before, after time.Time, cfg task.Config) {
	t.Helper()
	var req scheduleBody
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
		t.Fatalf("%d for a body that does not decode: %v", rec.Code, err)
	}
	got := decodeTask(t, rec)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d for a new task, want 201", rec.Code)
	}
	if loc := rec.Header().Get("Location"); loc != "/v1/lambdas/"+lambda+"/tasks/"+got.ID {
		t.Errorf("Location %q for task %s", loc, got.ID)
	}

	// The task reflects the request.
	if req.ID != "" && got.ID != req.ID || req.ID == "" && (len(got.ID) != 26 || task.ValidateID("id", got.ID) != nil) {
		t.Errorf("id %q, asked for %q", got.ID, req.ID)
	}
	wantPriority, wantAttempts := req.Priority, req.MaxAttempts
	if wantPriority == "" {
		wantPriority = "normal"
	}
	if wantAttempts == 0 {
		wantAttempts = cfg.MaxAttempts
	}
	wantStatus := task.StatusNew
	if len(req.After) > 0 {
		wantStatus = task.StatusPending // its upstreams exist: it waits for them
	}
	if got.Lambda != lambda || got.Status != wantStatus || got.Priority != wantPriority || got.Collection != req.Collection ||
		got.MaxAttempts != wantAttempts || got.Attempts != 0 || got.Version != 1 || got.Error != "" || !isNull(got.Result) {
		t.Errorf("task %+v for request %+v", got, req)
	}
	if !sameJSON(got.Payload, req.Payload) {
		t.Errorf("payload %s for a request with payload %s", got.Payload, req.Payload)
	}
	if !within(got.CreatedAt, before, after) || !got.UpdatedAt.Equal(got.CreatedAt) {
		t.Errorf("created at %s, updated at %s; the request was served in [%s, %s]", got.CreatedAt, got.UpdatedAt, before, after)
	}
	switch {
	case req.Delay != nil:
		d, _ := time.ParseDuration(*req.Delay)
		if !within(got.RunAt, before.Add(d), after.Add(d)) {
			t.Errorf("run at %s for a delay of %s from [%s, %s]", got.RunAt, d, before, after)
		}
	case req.RunAt != nil && req.RunAt.After(after):
		if !got.RunAt.Equal(*req.RunAt) {
			t.Errorf("run at %s, asked for %s", got.RunAt, req.RunAt)
		}
	case req.RunAt != nil && !req.RunAt.Before(before): // served around then: either is right
		if !got.RunAt.Equal(*req.RunAt) && !within(got.RunAt, before, after) {
			t.Errorf("run at %s, asked for %s", got.RunAt, req.RunAt)
		}
	default: // now, also for a time in the past
		if !within(got.RunAt, before, after) {
			t.Errorf("run at %s, asked for %v; served in [%s, %s]", got.RunAt, req.RunAt, before, after)
		}
	}
	if got.NextTriggerAt == nil || !got.NextTriggerAt.Equal(got.RunAt) {
		t.Errorf("next trigger %v, run at %s", got.NextTriggerAt, got.RunAt)
	}
	if (got.Deadline == nil) != (req.Deadline == nil) || got.Deadline != nil && !got.Deadline.Equal(*req.Deadline) {
		t.Errorf("deadline %v, asked for %v", got.Deadline, req.Deadline)
	}

	// The store holds it, and only it; the payload compacted.
	ctx := context.Background()
	stored, err := store.Get(ctx, lambda, got.ID)
	if err != nil {
		t.Fatalf("the task is not stored: %v", err)
	}
	sameTask(t, "stored", stored, got)
	if want := compact(req.Payload); !bytes.Equal(stored.Payload, want) {
		t.Errorf("stored payload %q, want %q", stored.Payload, want)
	}
	if counts, err := store.Counts(ctx, lambda); err != nil || !reflect.DeepEqual(counts, map[task.Status]int{task.StatusNew: 1}) {
		t.Errorf("counts %v, %v; want one new task", counts, err)
	}

	// The same request again, with an id: a replay.
	if req.ID == "" {
		return
	}
	again := serve(h, http.MethodPost, "/v1/lambdas/"+lambda+"/tasks", body)
	checkJSON(t, again)
	if again.Code != http.StatusOK {
		t.Fatalf("replay: status %d, want 200: %s", again.Code, again.Body)
	}
	sameTask(t, "replayed", decodeTask(t, again), got)
	if counts, err := store.Counts(ctx, lambda); err != nil || !reflect.DeepEqual(counts, map[task.Status]int{task.StatusNew: 1}) {
		t.Errorf("after the replay: counts %v, %v; want one new task", counts, err)
	}
}

func checkGate(t *testing.T, store task.Store, lambda string, body []byte, rec *httptest.ResponseRecorder, before, after time.Time) {
	t.Helper()
	var req struct {
		Mode       string `json:"mode"`
		Collection string `json:"collection"`
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
		t.Fatalf("%d for a body that does not decode: %v", rec.Code, err)
	}
	var got task.Gate
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("status %d: the body is not a gate: %v", rec.Code, err)
	}
	if rec.Code != http.StatusOK || got.Lambda != lambda || got.Mode != req.Mode || got.Collection != req.Collection || !within(got.UpdatedAt, before, after) {
		t.Fatalf("status %d, gate %+v for request %+v", rec.Code, got, req)
	}
	if req.Mode != task.GateOpen && req.Mode != task.GatePause && req.Mode != task.GateDrop {
		t.Fatalf("gate mode %q accepted", req.Mode)
	}
	gates, err := store.Gates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var mine []task.Gate
	for _, g := range gates {
		if g.Lambda == lambda {
			mine = append(mine, g)
		}
	}
	switch {
	case req.Mode == task.GateOpen && len(mine) != 0:
		t.Errorf("an open gate is stored: %+v", mine)
	case req.Mode != task.GateOpen && (len(mine) != 1 || mine[0].Mode != req.Mode || mine[0].Collection != req.Collection):
		t.Errorf("stored gates %+v for request %+v", mine, req)
	}
}

// decodeTask reads a task answer; it must hold the task's fields only (never its lease).
func decodeTask(t *testing.T, rec *httptest.ResponseRecorder) task.Task {
	t.Helper()
	var got task.Task
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("status %d: the body is not a task: %v\n%s", rec.Code, err, rec.Body)
	}
	return got
}

func sameTask(t *testing.T, what string, a, b task.Task) {
	t.Helper()
	sameTime := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	if a.ID != b.ID || a.Lambda != b.Lambda || a.Collection != b.Collection || a.Priority != b.Priority ||
		a.Status != b.Status || !sameJSON(a.Payload, b.Payload) || !sameJSON(a.Result, b.Result) || a.Error != b.Error ||
		a.Attempts != b.Attempts || a.MaxAttempts != b.MaxAttempts || !a.RunAt.Equal(b.RunAt) ||
		!sameTime(a.Deadline, b.Deadline) || !sameTime(a.NextTriggerAt, b.NextTriggerAt) ||
		!a.CreatedAt.Equal(b.CreatedAt) || !a.UpdatedAt.Equal(b.UpdatedAt) || a.Version != b.Version {
		t.Errorf("%s task %+v, answered %+v", what, a, b)
	}
}

func within(x, from, to time.Time) bool {
	return !x.Before(from.Truncate(0)) && !x.After(to.Truncate(0))
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

func compact(m json.RawMessage) []byte {
	if isNull(m) {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, m); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// sameJSON reports whether a and b are the same JSON value (null and none alike), numbers compared
// as written.
func sameJSON(a, b json.RawMessage) bool {
	if isNull(a) || isNull(b) {
		return isNull(a) && isNull(b)
	}
	decode := func(m json.RawMessage) (v any) {
		dec := json.NewDecoder(bytes.NewReader(m))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return err
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}
