package httpapi_test

import (
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestAttempts: GET .../attempts answers a task's history as the contract says (checked holds
// every answer to it): its attempts, oldest first, with outcome, error, duration and worker; an
// empty list for a task that never ran; 404 for a task or a lambda that does not exist.
func TestAttempts(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}})
	srv := httptest.NewServer(checked(t, httpapi.New(svc, nil)))
	t.Cleanup(srv.Close)

	if status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"id":"a","delay":"1h"}`); status != 201 {
		t.Fatalf("schedule: %d %v", status, out)
	}
	status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks/a/attempts", "")
	if list, _ := out["attempts"].([]any); status != 200 || list == nil || len(list) != 0 || out["attempts_dropped"] != 0.0 {
		t.Fatalf("a task that never ran: %d %v; want an empty list", status, out)
	}

	cfg := task.Config{}.WithDefaults()
	start := time.Now().UTC().Add(time.Hour)
	for _, step := range []func(task.Task) (task.Task, error){
		func(tk task.Task) (task.Task, error) { return task.Enqueue(tk, start, cfg) },
		func(tk task.Task) (task.Task, error) {
			tk, err := task.Claim(tk, "L", start, cfg)
			tk.Worker = "exec-1"
			return tk, err
		},
		func(tk task.Task) (task.Task, error) {
			return task.Fail(tk, "L", "boom", true, start.Add(250*time.Millisecond), cfg, 0)
		},
	} {
		if _, err := task.Apply(t.Context(), store, "echo", "a", step); err != nil {
			t.Fatal(err)
		}
	}
	status, out = call(t, srv, "GET", "/v1/lambdas/echo/tasks/a/attempts", "")
	list, _ := out["attempts"].([]any)
	if status != 200 || len(list) != 1 {
		t.Fatalf("after a failed attempt: %d %v", status, out)
	}
	a := list[0].(map[string]any)
	if a["attempt"] != 1.0 || a["outcome"] != "retriable" || a["error"] != "boom" || a["duration_ms"] != 250.0 || a["worker"] != "exec-1" {
		t.Errorf("the attempt: %v", a)
	}

	for _, path := range []string{"/v1/lambdas/echo/tasks/nope/attempts", "/v1/lambdas/nope/tasks/a/attempts"} {
		if status, out := call(t, srv, "GET", path, ""); status != 404 || errorCode(out) != "not_found" {
			t.Errorf("GET %s: %d %v, want 404 not_found", path, status, out)
		}
	}
}
