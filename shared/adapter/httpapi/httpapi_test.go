package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

func newServer(t *testing.T) *httptest.Server {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}})
	srv := httptest.NewServer(checked(t, httpapi.New(svc, nil)))
	t.Cleanup(srv.Close)
	return srv
}

func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
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

func errorCode(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func TestErrorsAreJSON(t *testing.T) {
	srv := newServer(t)
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/v2/nothing", "", 404, "no_route"},
		{"DELETE", "/v1/lambdas/echo/tasks", "", 405, "no_route"},
		{"GET", "/v1/lambdas/echo/tasks/missing", "", 404, "not_found"},
		{"GET", "/v1/lambdas/echo/tasks?status=lost", "", 422, "invalid"},
		{"GET", "/v1/lambdas/echo/tasks?limit=0", "", 422, "invalid"},
		{"GET", "/v1/lambdas/echo/tasks?cursor=zzz", "", 422, "invalid"},
		{"GET", "/v1/lambdas/echo/tasks?collection=%C2%84", "", 422, "invalid"},
		{"POST", "/v1/lambdas/echo/tasks/redrive", `{"collection":"a b"}`, 422, "invalid"},
		{"PUT", "/v1/lambdas/echo/gate", `{"mode":"shut"}`, 422, "invalid"},
		{"PUT", "/v1/lambdas/nope/gate", `{"mode":"pause"}`, 404, "not_found"},
		{"POST", "/v1/lambdas/echo/tasks/missing/cancel", "", 404, "not_found"},
		{"POST", "/v1/lambdas/echo/tasks", `{"max_attempts":"3"}`, 400, "malformed"},
		{"POST", "/v1/lambdas/echo/tasks", `{} {}`, 400, "malformed"},
		{"POST", "/v1/lambdas/echo/tasks", `null`, 400, "malformed"},
		{"PUT", "/v1/lambdas/echo/gate", ` null `, 400, "malformed"},
		{"POST", "/v1/lambdas/echo/tasks", `{"after":["x"]}`, 422, "invalid"},
	} {
		status, out := call(t, srv, tc.method, tc.path, tc.body)
		if status != tc.status || errorCode(out) != tc.code {
			t.Errorf("%s %s %s: got %d %v, want %d %s", tc.method, tc.path, tc.body, status, out, tc.status, tc.code)
		}
	}
}

// TestNoRouteKeepsTheMuxVerdict: a request without a route gets the mux's status and Allow
// header, in the API's error format.
func TestNoRouteKeepsTheMuxVerdict(t *testing.T) {
	srv := newServer(t)
	req, _ := http.NewRequest("DELETE", srv.URL+"/v1/lambdas/echo/tasks", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	if allow := resp.Header.Get("Allow"); resp.StatusCode != 405 || errorCode(out) != "no_route" || !strings.Contains(allow, "POST") || !strings.Contains(allow, "GET") {
		t.Fatalf("got %d %v, Allow %q; want 405 no_route, Allow naming GET and POST", resp.StatusCode, out, allow)
	}
}

func TestScheduleListAndLambdas(t *testing.T) {
	srv := newServer(t)
	for _, id := range []string{"a", "b", "c"} {
		if status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"id":"`+id+`","delay":"1h","priority":"low"}`); status != 201 || out["status"] != "new" {
			t.Fatalf("schedule %s: %d %v", id, status, out)
		}
	}
	var seen []string
	cursor := ""
	for {
		status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks?limit=2&status=new&cursor="+cursor, "")
		if status != 200 {
			t.Fatalf("list: %d %v", status, out)
		}
		for _, tk := range out["tasks"].([]any) {
			seen = append(seen, tk.(map[string]any)["id"].(string))
		}
		if cursor = out["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if strings.Join(seen, ",") != "a,b,c" {
		t.Fatalf("paged list: %v", seen)
	}
	if status, out := call(t, srv, "PUT", "/v1/lambdas/echo/gate", `{"mode":"pause","collection":"bulk"}`); status != 200 || out["mode"] != "pause" {
		t.Fatalf("gate: %d %v", status, out)
	}
	status, out := call(t, srv, "GET", "/v1/lambdas", "")
	l := out["lambdas"].([]any)[0].(map[string]any)
	if status != 200 || l["name"] != "echo" || l["counts"].(map[string]any)["new"] != 3.0 || len(l["gates"].([]any)) != 1 {
		t.Fatalf("lambdas: %d %v", status, out)
	}
}

// TestScheduleBatch: a batch creates every task or none, names a bad task by its index, and
// replays like a single schedule.
func TestScheduleBatch(t *testing.T) {
	srv := newServer(t)
	const batch = `{"tasks":[{"id":"b1","payload":{"n":1}},{"id":"b2","delay":"1h","priority":"low"},{}]}`
	status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks/batch", batch)
	tasks, _ := out["tasks"].([]any)
	if status != 201 || len(tasks) != 3 || tasks[0].(map[string]any)["id"] != "b1" || tasks[1].(map[string]any)["priority"] != "low" {
		t.Fatalf("batch: %d %v", status, out)
	}
	if status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks/b2", ""); status != 200 || out["status"] != "new" {
		t.Fatalf("get b2: %d %v", status, out)
	}
	// The same ids and requests again: a replay. The third task had no id, so it cannot be one.
	if status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks/batch", `{"tasks":[{"id":"b1","payload":{"n":1}},{"id":"b2","delay":"1h","priority":"low"}]}`); status != 200 || len(out["tasks"].([]any)) != 2 {
		t.Fatalf("replay: %d %v", status, out)
	}
	for _, tc := range []struct {
		body   string
		status int
		code   string
		msg    string
	}{
		{`{"tasks":[{"id":"b1","payload":{"n":2}}]}`, 409, "conflict", "tasks[0]"},
		{`{"tasks":[{"id":"c1"},{"id":"b1","payload":{"n":1}}]}`, 409, "conflict", "c1"},
		{`{"tasks":[{"id":"c2"},{"priority":"urgent"}]}`, 422, "invalid", "tasks[1]"},
		{`{"tasks":[{"id":"c3"},{"delay":"soon"}]}`, 422, "invalid", "tasks[1]"},
		{`{"tasks":[{"id":"c4"},{"id":"c4"}]}`, 422, "invalid", "twice"},
		{`{"tasks":[]}`, 422, "invalid", "1 to 100"},
		{`{"tasks":[` + strings.Repeat(`{},`, 100) + `{}]}`, 422, "invalid", "1 to 100"},
		{`{"tasks":{}}`, 400, "malformed", ""},
		{`{"tasks":[{"id":"c5"},null]}`, 422, "invalid", "tasks[1]"},
	} {
		status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks/batch", tc.body)
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if status != tc.status || errorCode(out) != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("%.60s: got %d %v, want %d %s naming %q", tc.body, status, out, tc.status, tc.code, tc.msg)
		}
	}
	// Nothing of a rejected batch was stored.
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		if status, _ := call(t, srv, "GET", "/v1/lambdas/echo/tasks/"+id, ""); status != 404 {
			t.Errorf("task %s of a rejected batch: %d, want 404", id, status)
		}
	}
}

// TestBatchAnswerHasNoPayloadField: a batch's answer leaves the payloads out, as the contract
// says, rather than answer them null, which reads as a task without one.
func TestBatchAnswerHasNoPayloadField(t *testing.T) {
	srv := newServer(t)
	status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks/batch", `{"tasks":[{"id":"p1","payload":{"n":1}},{"id":"p2"}]}`)
	tasks, _ := out["tasks"].([]any)
	if status != 201 || len(tasks) != 2 {
		t.Fatalf("batch: %d %v", status, out)
	}
	for _, tk := range tasks {
		if p, ok := tk.(map[string]any)["payload"]; ok {
			t.Errorf("batch answer %v: payload %v, want no payload field", tk, p)
		}
	}
	if status, out := call(t, srv, "GET", "/v1/lambdas/echo/tasks/p1", ""); status != 200 || out["payload"] == nil {
		t.Fatalf("get p1: %d %v, want its payload", status, out)
	}
}

// TestAfterTakesLambdaSlashID: an upstream may be named "LAMBDA/ID", as the CLI names it, in a
// schedule and in a call of after; a string with an empty lambda or id is refused, saying how to
// name one.
func TestAfterTakesLambdaSlashID(t *testing.T) {
	srv := newServer(t)
	for _, id := range []string{"up", "up2", "down2"} {
		if status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"id":"`+id+`","delay":"1h"}`); status != 201 {
			t.Fatalf("schedule %s: %d %v", id, status, out)
		}
	}
	status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"id":"down","after":["echo/up"]}`)
	if after, _ := json.Marshal(out["after"]); status != 201 || string(after) != `[{"id":"up","lambda":"echo"}]` {
		t.Fatalf(`schedule after "echo/up": %d %v`, status, out)
	}
	status, out = call(t, srv, "POST", "/v1/lambdas/echo/tasks/down2/after", `{"after":["echo/up2"]}`)
	if after, _ := json.Marshal(out["after"]); status != 200 || string(after) != `[{"id":"up2","lambda":"echo"}]` {
		t.Fatalf(`after "echo/up2": %d %v`, status, out)
	}
	for _, bad := range []string{"/up", "echo/"} {
		status, out := call(t, srv, "POST", "/v1/lambdas/echo/tasks", `{"after":["`+bad+`"]}`)
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if status != 400 || !strings.Contains(msg, "LAMBDA/ID") {
			t.Errorf("after %q: %d %v, want 400 naming LAMBDA/ID", bad, status, out)
		}
	}
}
