package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/taskend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// waitServer serves the API over the embedded store wrapped as atf dev wraps it, its ends
// waking the waiters.
func waitServer(t *testing.T, maxWait time.Duration) (*httptest.Server, *taskend.Store) {
	t.Helper()
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ends := taskend.Wrap(db)
	svc := frontend.New(ends, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}, Changes: ends, MaxWait: maxWait})
	srv := httptest.NewServer(checked(t, httpapi.New(svc, nil)))
	t.Cleanup(srv.Close)
	return srv, ends
}

func waitersBecome(t *testing.T, ends *taskend.Store, n int) {
	t.Helper()
	for stop := time.Now().Add(time.Minute); ends.Waiters() != n; runtime.Gosched() {
		if time.Now().After(stop) {
			t.Fatalf("the hub holds %d waiters, never %d", ends.Waiters(), n)
		}
	}
}

// TestGetWaitAnswersTheEnd: a GET with a wait is answered with the task as it ended, when
// another goroutine ends it.
func TestGetWaitAnswersTheEnd(t *testing.T) {
	srv, ends := waitServer(t, time.Hour)
	if status, _ := call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"id":"a","payload":{"n":1}}`); status != 201 {
		t.Fatalf("schedule: %d", status)
	}
	type answer struct {
		status int
		out    map[string]any
	}
	answered := make(chan answer, 1)
	go func() {
		status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks/a?wait=1h", "")
		answered <- answer{status, out}
	}()
	waitersBecome(t, ends, 1)
	go func() {
		if _, err := task.Apply(context.Background(), ends, "echo", "a", func(tk task.Task) (task.Task, error) {
			return task.Cancel(tk, time.Now().UTC())
		}); err != nil {
			t.Error(err)
		}
	}()
	a := <-answered
	if a.status != 200 || a.out["status"] != "cancelled" || a.out["id"] != "a" {
		t.Fatalf("GET ?wait=1h: %d %v; want 200 and the cancelled task", a.status, a.out)
	}
	if payload, _ := json.Marshal(a.out["payload"]); string(payload) != `{"n":1}` {
		t.Errorf("payload %s, want the task's whole", payload)
	}
	waitersBecome(t, ends, 0)
}

// TestGetWaitOver: a wait that ends first answers 200 with the task still waiting, and a wait
// past the server's maximum is cut to it.
func TestGetWaitOver(t *testing.T) {
	srv, _ := waitServer(t, 20*time.Millisecond)
	call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"id":"a"}`)
	for _, wait := range []string{"10ms", "25s", "0s"} {
		status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks/a?wait="+wait, "")
		if status != 200 || out["status"] != "new" {
			t.Errorf("GET ?wait=%s: %d %v; want 200 and the new task", wait, status, out)
		}
	}
	if status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks/missing?wait=1s", ""); status != 404 || errorCode(out) != "not_found" {
		t.Errorf("GET a missing task with a wait: %d %v; want 404", status, out)
	}
}

// TestGetWaitMalformed: a wait that is no duration, or is negative, is refused with 400 naming
// the form and the limit.
func TestGetWaitMalformed(t *testing.T) {
	srv, _ := waitServer(t, 0)
	call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"id":"a"}`)
	for _, wait := range []string{"", "25", "soon", "-1s", "1e3s"} {
		status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks/a?wait="+wait, "")
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if status != 400 || errorCode(out) != "malformed" || !strings.Contains(msg, `"25s"`) || !strings.Contains(msg, "at most 25s") {
			t.Errorf("GET ?wait=%s: %d %v; want 400 malformed naming the form and the 25s limit", wait, status, out)
		}
	}
}

// TestGetWaitClientGone: a client that goes away ends the wait; the hub forgets its waiter.
func TestGetWaitClientGone(t *testing.T) {
	srv, ends := waitServer(t, time.Hour)
	call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"id":"a"}`)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/lambdas/echo/tasks/a?wait=1h", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitersBecome(t, ends, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client's request: %v, want context.Canceled", err)
	}
	waitersBecome(t, ends, 0)
}
