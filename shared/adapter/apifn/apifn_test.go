package apifn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/adapter/apifn"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestEvents feeds every sample API Gateway event to the handler, each on a store that holds one
// task, evt-1 of the echo lambda, and checks the response and what the store holds after.
func TestEvents(t *testing.T) {
	cases := map[string]struct {
		status int
		body   string                       // the response body contains it
		check  func(*testing.T, task.Store) // the store after, if it changed
	}{
		"schedule.json": {201, `"id":"evt-new"`, func(t *testing.T, s task.Store) {
			got, err := s.Get(t.Context(), "echo", "evt-new")
			if err != nil || got.Priority != "high" || string(got.Payload) != `{"hi":"there"}` {
				t.Errorf("stored: %+v, %v", got, err)
			}
		}},
		"get.json":         {200, `"status":"new"`, nil},
		"get-missing.json": {404, `"code":"not_found"`, nil},
		"list.json":        {200, `"id":"evt-1"`, nil},
		"cancel.json": {200, `"status":"cancelled"`, func(t *testing.T, s task.Store) {
			if got, _ := s.Get(t.Context(), "echo", "evt-1"); got.Status != task.StatusCancelled {
				t.Errorf("stored status %s, want cancelled", got.Status)
			}
		}},
		"gate.json": {200, `"mode":"pause"`, func(t *testing.T, s task.Store) {
			gates, _ := s.Gates(t.Context())
			if len(gates) != 1 || gates[0].Collection != "marketing" || gates[0].Mode != task.GatePause {
				t.Errorf("stored gates %+v, want marketing paused", gates)
			}
		}},
		"lambdas.json":        {200, `"name":"echo"`, nil},
		"bad-json.json":       {400, `"code":"malformed"`, nil},
		"bad-priority.json":   {422, `"code":"invalid"`, nil},
		"bad-delay.json":      {422, `delay must not be negative`, nil},
		"unknown-lambda.json": {404, `"code":"not_found"`, nil},
	}
	files, err := filepath.Glob("../../../events/api/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample events: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		want, ok := cases[name]
		if !ok {
			t.Errorf("%s: a sample event without an expected response", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			store, h := newHandler(t)
			var req events.APIGatewayProxyRequest
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &req); err != nil {
				t.Fatal(err)
			}
			before, _, _ := store.List(t.Context(), task.ListParams{Lambda: "echo"})
			resp, err := h.Handle(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(resp.Body)); err != nil {
				t.Fatalf("body is not JSON: %v\n%s", err, resp.Body)
			}
			body := compact.String()
			if resp.StatusCode != want.status || !strings.Contains(body, want.body) {
				t.Errorf("got %d %s, want %d containing %s", resp.StatusCode, resp.Body, want.status, want.body)
			}
			if ct := resp.Headers["Content-Type"] + strings.Join(resp.MultiValueHeaders["Content-Type"], ""); !strings.Contains(ct, "application/json") {
				t.Errorf("content type %q, want JSON", ct)
			}
			if want.check != nil {
				want.check(t, store)
			} else if after, _, _ := store.List(t.Context(), task.ListParams{Lambda: "echo"}); len(after) != len(before) || after[0].Version != before[0].Version {
				t.Errorf("the request changed the stored tasks")
			}
		})
	}
}

func newHandler(t *testing.T) (task.Store, *apifn.Handler) {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	echo := task.Lambda{Name: "echo"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	tk, err := task.New(task.Spec{ID: "evt-1", Payload: []byte(`{"n":1}`)}, echo, time.Now(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Create(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{echo}, Task: cfg})
	quiet := slog.New(slog.DiscardHandler)
	return store, apifn.New(httpapi.New(svc, quiet), quiet)
}

// TestServeHTTP serves plain HTTP through the function handler, as `atf dev --functions` does.
func TestServeHTTP(t *testing.T) {
	store, h := newHandler(t)
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := &client.Client{Endpoint: srv.URL}
	tk, created, err := c.Schedule(t.Context(), "echo", client.ScheduleRequest{ID: "http-1", Payload: []byte(`{"a":1}`), Collection: "c"})
	if err != nil || !created || tk.ID != "http-1" {
		t.Fatalf("schedule: %+v, %v, %v", tk, created, err)
	}
	if got, err := store.Get(t.Context(), "echo", "http-1"); err != nil || got.Collection != "c" {
		t.Errorf("stored: %+v, %v", got, err)
	}
	tasks, _, err := c.List(t.Context(), task.ListParams{Lambda: "echo", Collection: "c"}) // a query string
	if err != nil || len(tasks) != 1 {
		t.Errorf("list by collection: %d tasks, %v; want 1", len(tasks), err)
	}
	var apiErr *client.Error
	if _, err := c.Get(t.Context(), "echo", "missing"); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Errorf("get missing: %v, want a 404", err)
	}
	// The path reaches the function still escaped, as from API Gateway: "%25" is a literal '%',
	// "%3F" a '?' inside the id, neither a broken escape nor a query.
	for _, p := range []string{"/v1/lambdas/echo/tasks/50%25", "/v1/lambdas/echo/tasks/http-1%3Fx"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
}

// hangingStore never answers a read: it blocks until the call's context ends.
type hangingStore struct{ task.Store }

func (hangingStore) Get(ctx context.Context, _, _ string) (task.Task, error) {
	<-ctx.Done()
	return task.Task{}, ctx.Err()
}

// TestAnswersBeforeTheFunctionsDeadline: a request the store does not answer is cut before the
// function's own deadline and answered 503 store_unavailable, where the function would otherwise
// time out and API Gateway answer a bare 5xx of its own.
func TestAnswersBeforeTheFunctionsDeadline(t *testing.T) {
	store, _ := newHandler(t)
	svc := frontend.New(hangingStore{store}, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}})
	quiet := slog.New(slog.DiscardHandler)
	h := apifn.New(httpapi.New(svc, quiet), quiet) // the default store budget outlasts the function
	deadline := time.Now().Add(apifn.AnswerMargin + 500*time.Millisecond)
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	resp, err := h.Handle(ctx, events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/v1/lambdas/echo/tasks/evt-1"})
	if err != nil {
		t.Fatal(err)
	}
	if answered := time.Now(); answered.After(deadline) {
		t.Errorf("answered %s after the function's deadline", answered.Sub(deadline))
	}
	retryAfter := resp.Headers["Retry-After"] + strings.Join(resp.MultiValueHeaders["Retry-After"], "")
	if resp.StatusCode != 503 || !strings.Contains(resp.Body, `"store_unavailable"`) || retryAfter == "" {
		t.Errorf("got %d %s Retry-After %q, want 503 store_unavailable with a Retry-After", resp.StatusCode, resp.Body, retryAfter)
	}
}
