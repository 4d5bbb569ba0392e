package httpapi_test

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// deadServer serves echo with n tasks t0..t(n-1), each failed for good: dead when even, fatal
// when odd.
func deadServer(t *testing.T, n int) (*httptest.Server, *sqlitestore.Store) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}})
	srv := httptest.NewServer(checked(t, httpapi.New(svc, nil)))
	t.Cleanup(srv.Close)
	for i := range n {
		if status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks", fmt.Sprintf(`{"id":"t%d","payload":{"i":%d}}`, i, i)); status != 201 {
			t.Fatalf("schedule: %d %v", status, out)
		}
		tk, err := store.Get(t.Context(), "echo", fmt.Sprintf("t%d", i))
		if err != nil {
			t.Fatal(err)
		}
		dead := tk
		dead.Status, dead.NextTriggerAt, dead.Version, dead.Attempts, dead.Error = task.Failed[(i+1)%2], nil, tk.Version+1, 5, "boom"
		if err := store.Update(t.Context(), dead, tk.Version); err != nil {
			t.Fatal(err)
		}
	}
	return srv, store
}

func TestRedriveAPI(t *testing.T) {
	srv, store := deadServer(t, 7)

	// The dead letters, both statuses at once, and one of them.
	status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks?status=dead,fatal_failure", "")
	if tasks, _ := out["tasks"].([]any); status != 200 || len(tasks) != 7 {
		t.Fatalf("list of failed tasks: %d, %d tasks", status, len(tasks))
	}
	if _, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks?status=fatal_failure", ""); len(out["tasks"].([]any)) != 3 {
		t.Errorf("list of fatal failures: %v, want 3", out)
	}
	future := url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))
	if _, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks?status=dead&created_from="+future, ""); len(out["tasks"].([]any)) != 0 {
		t.Errorf("list of tasks created in the future: %v, want none", out)
	}

	// One, with a new payload.
	status, out = call(t, srv, "POST", "/v1/lambdas/echo/tasks/t0/redrive", `{"payload":{"fixed":true},"max_attempts":2}`)
	if status != 200 || out["status"] != "new" || out["attempts"] != 0.0 || out["max_attempts"] != 2.0 {
		t.Fatalf("redrive t0: %d %v", status, out)
	}
	if tk, _ := store.Get(t.Context(), "echo", "t0"); string(tk.Payload) != `{"fixed":true}` {
		t.Errorf("redriven t0 has payload %s", tk.Payload)
	}
	// One without a body.
	if status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks/t1/redrive", ""); status != 200 || out["status"] != "new" {
		t.Fatalf("redrive t1 without a body: %d %v", status, out)
	}

	// The rest, two a page.
	total, cursor := 0.0, ""
	for page := 0; page < 10; page++ {
		status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks/redrive", fmt.Sprintf(`{"limit":2,"cursor":%q}`, cursor))
		if status != 200 {
			t.Fatalf("redrive a page: %d %v", status, out)
		}
		total += out["redriven"].(float64)
		if cursor, _ = out["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if total != 5 {
		t.Errorf("redriven by pages: %v, want 5", total)
	}
	counts, _ := store.Counts(t.Context(), "echo")
	if counts[task.StatusNew] != 7 {
		t.Errorf("counts after the redrives: %v, want 7 new", counts)
	}

	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/lambdas/echo/tasks/t0/redrive", "", 409, "conflict"}, // new, not failed
		{"POST", "/v1/lambdas/echo/tasks/missing/redrive", "", 404, "not_found"},
		{"POST", "/v1/lambdas/nope/tasks/t0/redrive", "", 404, "not_found"},
		{"POST", "/v1/lambdas/echo/tasks/t0/redrive", `{"priority":"urgent"}`, 422, "invalid"},
		{"POST", "/v1/lambdas/echo/tasks/t0/redrive", `{"attempts":1}`, 400, "malformed"},
		{"POST", "/v1/lambdas/echo/tasks/redrive", `{"status":"new"}`, 422, "invalid"},
		{"POST", "/v1/lambdas/echo/tasks/redrive", `{"limit":101}`, 422, "invalid"},
		{"POST", "/v1/lambdas/echo/tasks/redrive", `{"cursor":"zzz"}`, 422, "invalid"},
		{"GET", "/v1/lambdas/echo/tasks?created_to=yesterday", "", 422, "invalid"},
		{"GET", "/v1/lambdas/echo/tasks?status=dead,lost", "", 422, "invalid"},
	} {
		status, out := call(t, srv, tc.method, tc.path, tc.body)
		if status != tc.status || errorCode(out) != tc.code {
			t.Errorf("%s %s %s: got %d %v, want %d %s", tc.method, tc.path, tc.body, status, out, tc.status, tc.code)
		}
	}
}
