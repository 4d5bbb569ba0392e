package httpapi_test

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/catalogtest"
)

// TestRemovedLambda: a lambda gone from the catalog is answered as one never registered, 404
// not_found, for new tasks and for its tasks alike, and is no longer listed; its tasks stay in
// the store, and are served again once it is back.
func TestRemovedLambda(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	echo, resize := task.Lambda{Name: "echo"}.WithDefaults(), task.Lambda{Name: "resize"}.WithDefaults()
	cat := &catalogtest.Changing{}
	cat.Set(echo, resize)
	srv := httptest.NewServer(checked(t, httpapi.New(frontend.New(store, frontend.Config{Lambdas: cat}), nil)))
	t.Cleanup(srv.Close)
	if code, out := call(t, srv, "POST", "/v1/lambdas/resize/tasks", `{"id":"t1","delay":"1h"}`); code != 201 {
		t.Fatalf("schedule: %d %v", code, out)
	}

	cat.Set(echo) // resize's stack deleted
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/lambdas/resize/tasks", `{"id":"t2"}`},
		{"POST", "/v1/lambdas/resize/tasks/batch", `{"tasks":[{"id":"t3"}]}`},
		{"POST", "/v1/lambdas/echo/tasks/batch", `{"tasks":[{"id":"t4","lambda":"resize"}]}`},
		{"POST", "/v1/lambdas/resize/schedules", `{"id":"s1","rate":"rate(2s)"}`},
		{"GET", "/v1/lambdas/resize/tasks/t1", ""},
		{"GET", "/v1/lambdas/resize/tasks", ""},
		{"POST", "/v1/lambdas/resize/tasks/t1/cancel", ""},
		{"PUT", "/v1/lambdas/resize/gate", `{"mode":"pause"}`},
	} {
		if code, out := call(t, srv, r.method, r.path, r.body); code != 404 || errorCode(out) != "not_found" {
			t.Errorf("%s %s of a removed lambda: %d %v, want 404 not_found", r.method, r.path, code, out)
		}
	}
	if code, out := call(t, srv, "GET", "/v1/lambdas", ""); code != 200 || len(out["lambdas"].([]any)) != 1 {
		t.Errorf("lambdas: %d %v, want echo alone", code, out)
	}
	if tk, err := store.Get(t.Context(), "resize", "t1"); err != nil || tk.Status != task.StatusNew {
		t.Fatalf("the removed lambda's task in the store: %+v, %v; want it kept, waiting", tk, err)
	}

	cat.Set(echo, resize) // deployed again
	if code, out := call(t, srv, "GET", "/v1/lambdas/resize/tasks/t1", ""); code != 200 || out["status"] != "new" {
		t.Errorf("the task once its lambda is back: %d %v", code, out)
	}
}

// TestCatalogUnavailable: when the catalog cannot say which lambdas there are (SSM out of reach
// with no read of it recent enough), requests answer 503 store_unavailable with a Retry-After,
// as for a store outage, without the cause.
func TestCatalogUnavailable(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cat := &catalogtest.Changing{}
	cat.Fail(task.Errorf(task.ErrUnavailable, "the lambdas are unknown: dial tcp 10.0.0.1:443"))
	srv := httptest.NewServer(checked(t, httpapi.New(frontend.New(store, frontend.Config{Lambdas: cat}), slog.New(slog.DiscardHandler))))
	t.Cleanup(srv.Close)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/lambdas/echo/tasks", `{"id":"t1"}`},
		{"GET", "/v1/lambdas/echo/tasks/t1", ""},
		{"GET", "/v1/lambdas", ""},
	} {
		code, out := call(t, srv, r.method, r.path, r.body)
		if code != 503 || errorCode(out) != "store_unavailable" || strings.Contains(fmt.Sprint(out), "10.0.0.1") {
			t.Errorf("%s %s: %d %v, want 503 store_unavailable without the cause", r.method, r.path, code, out)
		}
	}
}
