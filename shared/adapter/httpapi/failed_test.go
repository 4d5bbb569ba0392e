package httpapi_test

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestListFailedAPI: GET /v1/tasks pages through the failed tasks of every lambda, the latest
// updated first, of the lambdas registered only, filters by the failed statuses only, and refuses
// a lambda's other filters.
func TestListFailedAPI(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults(), task.Lambda{Name: "other"}.WithDefaults()}})
	srv := httptest.NewServer(checked(t, httpapi.New(svc, nil)))
	t.Cleanup(srv.Close)
	// Each ends a second after the one before: e0 dead, o1 fatal, e2 success, o3 dead, e4 fatal.
	ended := time.Now().UTC().Add(time.Hour)
	for i, status := range []task.Status{task.StatusDead, task.StatusFatalFailure, task.StatusSuccess, task.StatusDead, task.StatusFatalFailure} {
		lambda, id := "echo", fmt.Sprintf("e%d", i)
		if i%2 == 1 {
			lambda, id = "other", fmt.Sprintf("o%d", i)
		}
		if code, out := call(t, srv, "POST", "/v1/lambdas/"+lambda+"/tasks", `{"id":"`+id+`","delay":"1h"}`); code != 201 {
			t.Fatalf("schedule %s/%s: %d %v", lambda, id, code, out)
		}
		tk, err := store.Get(t.Context(), lambda, id)
		if err != nil {
			t.Fatal(err)
		}
		end := tk
		end.Status, end.NextTriggerAt, end.Version, end.UpdatedAt = status, nil, tk.Version+1, ended.Add(time.Duration(i)*time.Second)
		if err := store.Update(t.Context(), end, tk.Version); err != nil {
			t.Fatal(err)
		}
	}
	// The latest of all, of a lambda no longer registered: the API answers 404 for it, and leaves
	// it out here.
	gone := task.Task{ID: "g", Lambda: "gone", Priority: "normal", Status: task.StatusDead, MaxAttempts: 1,
		RunAt: ended, CreatedAt: ended, UpdatedAt: ended.Add(time.Minute), Version: 2}
	if err := store.Create(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	list := func(query string) []string {
		t.Helper()
		var seen []string
		cursor := ""
		for range 10 {
			code, out := call(t, srv, "GET", "/v1/tasks?limit=2&cursor="+cursor+query, "")
			if code != 200 {
				t.Fatalf("GET /v1/tasks%s: %d %v", query, code, out)
			}
			tasks := out["tasks"].([]any)
			if len(tasks) > 2 {
				t.Fatalf("GET /v1/tasks%s: %d tasks, over the limit", query, len(tasks))
			}
			for _, tk := range tasks {
				m := tk.(map[string]any)
				seen = append(seen, m["lambda"].(string)+"/"+m["id"].(string))
			}
			if cursor = out["next_cursor"].(string); cursor == "" {
				return seen
			}
		}
		t.Fatalf("GET /v1/tasks%s: still a cursor after 10 pages", query)
		return nil
	}
	for query, want := range map[string]string{
		"":                                     "echo/e4,other/o3,other/o1,echo/e0",
		"&status=dead,fatal_failure":           "echo/e4,other/o3,other/o1,echo/e0",
		"&status=dead":                         "other/o3,echo/e0",
		"&status=fatal_failure&status=":        "echo/e4,other/o1",
		"&status=fatal_failure,,fatal_failure": "echo/e4,other/o1",
	} {
		if got := strings.Join(list(query), ","); got != want {
			t.Errorf("GET /v1/tasks%s: %s, want %s", query, got, want)
		}
	}
	for _, query := range []string{"?status=success", "?status=dead,new", "?collection=c", "?created_from=2026-01-01T00:00:00Z", "?limit=0", "?limit=1001", "?cursor=zzz"} {
		if code, out := call(t, srv, "GET", "/v1/tasks"+query, ""); code != 422 || errorCode(out) != "invalid" {
			t.Errorf("GET /v1/tasks%s: %d %v, want 422 invalid", query, code, out)
		}
	}
}
