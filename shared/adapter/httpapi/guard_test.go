package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestBodiesMustBeJSON: a body that is not application/json (UTF-8) gets 415, before anything is
// stored, so that a web page's text/plain or form POST, which browsers send cross-origin without
// asking, schedules and cancels nothing.
func TestBodiesMustBeJSON(t *testing.T) {
	srv := newServer(t)
	send := func(method, path, contentType, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v", method, path, err)
		}
		return resp.StatusCode, out
	}
	const schedule = "/v1/lambdas/echo/tasks"
	for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json; charset=latin1", "application/jsonx", "", "nonsense;;"} {
		if status, out := send("POST", schedule, ct, `{"id":"t1"}`); status != 415 || errorCode(out) != "unsupported_media_type" {
			t.Errorf("schedule with content type %q: %d %v, want 415 unsupported_media_type", ct, status, out)
		}
	}
	if status, out := send("PUT", "/v1/lambdas/echo/gate", "text/plain", `{"mode":"drop"}`); status != 415 {
		t.Errorf("gate as text/plain: %d %v, want 415", status, out)
	}
	if status, _ := send("GET", schedule+"/t1", "", ""); status != 404 {
		t.Fatalf("a refused schedule stored task t1: %d", status)
	}
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;Charset=UTF-8"} {
		id := string(rune('a' + i))
		if status, out := send("POST", schedule, ct, `{"id":"`+id+`","delay":"1h"}`); status != 201 {
			t.Errorf("schedule as %q: %d %v, want 201", ct, status, out)
		}
	}
	// A cancel has no body: it needs no type, but may not claim another.
	if status, out := send("POST", schedule+"/a/cancel", "text/plain", ""); status != 415 {
		t.Errorf("cancel as text/plain: %d %v, want 415", status, out)
	}
	if status, out := send("POST", schedule+"/a/cancel", "", ""); status != 200 || out["status"] != "cancelled" {
		t.Errorf("cancel without a body: %d %v, want 200 cancelled", status, out)
	}
}

// TestGuard: on a loopback listener, a foreign Host (DNS rebinding) or Origin (another site's page)
// gets 403; with a token, a request without it gets 401.
func TestGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	for _, tc := range []struct {
		name          string
		addr          net.Addr
		token         string
		host, origin  string
		authorization string
		status        int
	}{
		{"localhost", loopback, "", "localhost:8080", "", "", 418},
		{"LOCALHOST", loopback, "", "LOCALHOST:8080", "", "", 418},
		{"127.0.0.1", loopback, "", "127.0.0.1:8080", "", "", 418},
		{"[::1]", loopback, "", "[::1]:8080", "", "", 418},
		{"same origin", loopback, "", "localhost:8080", "http://127.0.0.1:8080", "", 418},
		{"rebound name", loopback, "", "evil.example:8080", "", "", 403},
		{"rebound name, no port", loopback, "", "evil.example", "", "", 403},
		{"another port", loopback, "", "localhost:9999", "", "", 403},
		{"no port", loopback, "", "localhost", "", "", 403},
		{"lan address", loopback, "", "192.168.1.2:8080", "", "", 403},
		{"suffix", loopback, "", "localhost.evil.example:8080", "", "", 403},
		{"another site", loopback, "", "localhost:8080", "https://evil.example", "", 403},
		{"another port's page", loopback, "", "localhost:8080", "http://localhost:3000", "", 403},
		{"https origin", loopback, "", "localhost:8080", "https://localhost:8080", "", 403},
		{"sandboxed page", loopback, "", "localhost:8080", "null", "", 403},
		{"port 80 leaves it out", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}, "", "localhost", "http://localhost", "", 418},
		{"ipv6 listener", &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}, "", "[::1]:8080", "", "", 418},
		{"not loopback: any host", &net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "", "atf.internal:8080", "https://elsewhere", "", 418},
		{"token", loopback, "s3cret", "localhost:8080", "", "Bearer s3cret", 418},
		{"no token", loopback, "s3cret", "localhost:8080", "", "", 401},
		{"wrong token", loopback, "s3cret", "localhost:8080", "", "Bearer s3cre", 401},
		{"basic", loopback, "s3cret", "localhost:8080", "", "Basic s3cret", 401},
		{"token, not loopback", &net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "s3cret", "atf.internal:8080", "", "", 401},
		{"token does not open the host check", loopback, "s3cret", "evil.example:8080", "", "Bearer s3cret", 403},
	} {
		req := httptest.NewRequest("GET", "/v1/lambdas", nil)
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.authorization != "" {
			req.Header.Set("Authorization", tc.authorization)
		}
		rec := httptest.NewRecorder()
		httpapi.Guard(ok, tc.addr, tc.token).ServeHTTP(rec, req)
		if rec.Code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, rec.Body, tc.status)
		}
		if rec.Code != 418 && !json.Valid(rec.Body.Bytes()) {
			t.Errorf("%s: the refusal is not JSON: %s", tc.name, rec.Body)
		}
	}
}

// failingStore fails every write and read of tasks with err.
type failingStore struct {
	task.Store
	err error
}

func (s failingStore) Create(context.Context, task.Task) error        { return s.err }
func (s failingStore) CreateBatch(context.Context, []task.Task) error { return s.err }
func (s failingStore) Get(context.Context, string, string) (task.Task, error) {
	return task.Task{}, s.err
}

// TestErrorsThatAreNoFault: a full store, a throttled one and one out of reach answer codes of their own with a
// Retry-After, and a client that went away is not logged as an internal error.
func TestErrorsThatAreNoFault(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lambdas := []task.Lambda{task.Lambda{Name: "echo"}.WithDefaults()}
	for _, tc := range []struct {
		err        error
		status     int
		code       string
		retryAfter bool
	}{
		{task.Errorf(task.ErrStorageFull, "the task store is full"), 507, "storage_full", true},
		{task.Errorf(task.ErrThrottled, "the task store is busy"), 429, "throttled", true},
		{task.Errorf(task.ErrUnavailable, "the task store is unavailable"), 503, "store_unavailable", true},
	} {
		h := checked(t, httpapi.New(frontend.New(failingStore{store, tc.err}, frontend.Config{Lambdas: task.FixedCatalog(lambdas)}), log))
		for _, req := range []*http.Request{
			httptest.NewRequest("POST", "/v1/lambdas/echo/tasks", strings.NewReader(`{}`)),
			httptest.NewRequest("GET", "/v1/lambdas/echo/tasks/x", nil),
		} {
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var out map[string]any
			json.Unmarshal(rec.Body.Bytes(), &out)
			if rec.Code != tc.status || errorCode(out) != tc.code || (rec.Header().Get("Retry-After") != "") != tc.retryAfter {
				t.Errorf("%s %s on %v: %d %v Retry-After %q; want %d %s", req.Method, req.URL, tc.err, rec.Code, out, rec.Header().Get("Retry-After"), tc.status, tc.code)
			}
		}
	}

	// The request's context ends when its client goes away, as net/http ends it.
	h := checked(t, httpapi.New(frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog(lambdas)}), log))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/lambdas/echo/tasks/x", nil).WithContext(ctx))
	if rec.Code != 499 {
		t.Errorf("a request whose client went away: %d %s, want 499", rec.Code, rec.Body)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("an error that is no fault of the server was logged as one:\n%s", logs.String())
	}
}

// timeoutReader returns what a connection returns once its read deadline has passed.
type timeoutReader struct{}

func (timeoutReader) Read([]byte) (int, error) { return 0, os.ErrDeadlineExceeded }

// TestSlowBody: a body cut by the listener's read timeout is a 408, not a 400 quoting the
// connection's addresses.
func TestSlowBody(t *testing.T) {
	h := checked(t, httpapi.New(frontend.New(nil, frontend.Config{}), slog.New(slog.DiscardHandler)))
	req := httptest.NewRequest("POST", "/v1/lambdas/echo/tasks", io.MultiReader(strings.NewReader(`{"id":`), timeoutReader{}))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	json.Unmarshal(rec.Body.Bytes(), &out)
	if rec.Code != http.StatusRequestTimeout || errorCode(out) != "timeout" {
		t.Errorf("a body cut by the read timeout: %d %s, want 408 timeout", rec.Code, rec.Body)
	}
}
