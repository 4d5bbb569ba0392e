package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// fakeFlowAPI answers GET task and GET downstreams from tasks given with their after, and records
// the bodies of the POSTs it gets, so the CLI's flow commands can be checked without a store.
type fakeFlowAPI struct {
	tasks map[task.Ref]task.Task
	order []task.Ref // the order downstreams are listed in

	mu    sync.Mutex
	calls int
	posts map[string]string // path → body
}

func newFakeFlowAPI(tasks ...task.Task) *fakeFlowAPI {
	f := &fakeFlowAPI{tasks: map[task.Ref]task.Task{}, posts: map[string]string{}}
	for _, t := range tasks {
		f.tasks[t.Ref()] = t
		f.order = append(f.order, t.Ref())
	}
	return f
}

func (f *fakeFlowAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/lambdas/"), "/")
	if r.Method == http.MethodPost {
		b, _ := io.ReadAll(r.Body)
		f.posts[r.URL.Path] = string(b)
		json.NewEncoder(w).Encode(task.Task{ID: "x", Lambda: parts[0], Status: task.StatusPending})
		return
	}
	ref := task.Ref{Lambda: parts[0], ID: parts[2]}
	t, ok := f.tasks[ref]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"not_found","message":"no such task"}}`)
		return
	}
	if len(parts) == 3 {
		json.NewEncoder(w).Encode(t)
		return
	}
	var downs []client.Downstream
	for _, d := range f.order {
		if slices.Contains(f.tasks[d].After, ref) {
			downs = append(downs, client.Downstream{Lambda: d.Lambda, ID: d.ID, Status: f.tasks[d].Status})
		}
	}
	from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	to, next := min(from+limit, len(downs)), ""
	if to < len(downs) {
		next = strconv.Itoa(to)
	}
	json.NewEncoder(w).Encode(map[string]any{"downstreams": downs[from:to], "next_cursor": next})
}

func flowTask(lambda, id string, status task.Status, after ...task.Ref) task.Task {
	return task.Task{Lambda: lambda, ID: id, Status: status, After: after, AfterCount: len(after)}
}

func ref(lambda, id string) task.Ref { return task.Ref{Lambda: lambda, ID: id} }

// TestGraphCommand: atf graph prints the tasks a task waits for and those that wait for it as
// indented trees, each task once in full (a diamond's top again as "see above"), and marks with
// "..." where --limit or --depth cut the walk, saying so at the end.
func TestGraphCommand(t *testing.T) {
	api := newFakeFlowAPI(
		flowTask("echo", "a", task.StatusSuccess),
		flowTask("echo", "b", task.StatusSuccess, ref("echo", "a")),
		flowTask("echo", "c", task.StatusFatalFailure, ref("echo", "a")),
		flowTask("join", "d", task.StatusUpstreamFailed, ref("echo", "b"), ref("echo", "c")),
		flowTask("echo", "e", task.StatusUpstreamFailed, ref("join", "d")),
		flowTask("echo", "f", task.StatusSuccess, ref("join", "d")),
	)
	api.tasks[ref("echo", "c")] = func(t task.Task) task.Task { t.Error = "boom\nsecond line"; return t }(api.tasks[ref("echo", "c")])
	api.tasks[ref("join", "d")] = func(t task.Task) task.Task { t.Error = "upstream echo/c ended fatal_failure"; return t }(api.tasks[ref("join", "d")])
	srv := httptest.NewServer(api)
	defer srv.Close()
	graph := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(append([]string{"graph", "--endpoint", srv.URL}, args...), &out); err != nil {
			t.Fatalf("atf graph %v: %v", args, err)
		}
		return out.String()
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"join", "d"}, `
join/d  upstream_failed  trigger rule all_success; upstream echo/c ended fatal_failure
upstreams (it waits for them):
  echo/b  success
    echo/a  success
  echo/c  fatal_failure  boom
    echo/a  success  (see above)
downstreams (they wait for it):
  echo/e  upstream_failed
  echo/f  success
`},
		{[]string{"echo", "a"}, `
echo/a  success
upstreams (it waits for them):
  none
downstreams (they wait for it):
  echo/b  success
    join/d  upstream_failed
      echo/e  upstream_failed
      echo/f  success
  echo/c  fatal_failure
    join/d  upstream_failed  (see above)
`},
		{[]string{"echo", "a", "--limit", "3"}, `
echo/a  success
upstreams (it waits for them):
  none
downstreams (they wait for it):
  echo/b  success
    join/d  upstream_failed
      ...
  echo/c  fatal_failure
    join/d  upstream_failed  (see above)
cut at --limit 3 tasks each way: "..." marks tasks with more not shown
`},
		{[]string{"echo", "e", "--depth", "1"}, `
echo/e  upstream_failed  trigger rule all_success
upstreams (it waits for them):
  join/d  upstream_failed  upstream echo/c ended fatal_failure
    ...
downstreams (they wait for it):
  none
cut at --limit 200 tasks each way or --depth 1: "..." marks tasks with more not shown
`},
		{[]string{"echo", "a", "--limit", "1"}, `
echo/a  success
upstreams (it waits for them):
  none
downstreams (they wait for it):
  echo/b  success
    ...
  ...
cut at --limit 1 tasks each way: "..." marks tasks with more not shown
`},
	} {
		if got := graph(tc.args...); got != strings.TrimPrefix(tc.want, "\n") {
			t.Errorf("atf graph %v:\n%s\nwant:\n%s", tc.args, got, strings.TrimPrefix(tc.want, "\n"))
		}
	}

	var v graphView
	if err := json.Unmarshal([]byte(graph("echo", "a", "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Downstreams) != 2 || v.Downstreams[1].Next[0].ID != "d" || !v.Downstreams[1].Next[0].Seen || v.Cut {
		t.Errorf("--json: %+v", v)
	}
	if err := run([]string{"graph", "echo", "nope", "--endpoint", srv.URL}, io.Discard); err == nil || !strings.Contains(err.Error(), "no such task") {
		t.Errorf("a missing task: %v", err)
	}
	if err := run([]string{"graph", "echo", "a", "--limit", "0", "--endpoint", srv.URL}, io.Discard); err == nil {
		t.Error("--limit 0 was taken")
	}
}

// TestGraphCommandBounded: a task with more downstreams than --limit costs a bounded number of
// calls, whatever their number.
func TestGraphCommandBounded(t *testing.T) {
	tasks := []task.Task{flowTask("l", "top", task.StatusSuccess)}
	for i := range 5000 {
		tasks = append(tasks, flowTask("l", "d"+strconv.Itoa(i), task.StatusPending, ref("l", "top")))
	}
	api := newFakeFlowAPI(tasks...)
	srv := httptest.NewServer(api)
	defer srv.Close()
	var out bytes.Buffer
	if err := run([]string{"graph", "l", "top", "--endpoint", srv.URL}, &out); err != nil {
		t.Fatal(err)
	}
	if shown := strings.Count(out.String(), "pending"); shown != defaultGraphLimit || !strings.Contains(out.String(), "cut at --limit 200") {
		t.Errorf("%d downstreams shown, want %d and a cut:\n%s", shown, defaultGraphLimit, out.String())
	}
	// The task, a page of its downstreams, and a page of the downstreams of each one shown.
	if api.calls > 2+defaultGraphLimit {
		t.Errorf("%d calls", api.calls)
	}
}

// clientID matches the id the client puts first in a schedule's body.
var clientID = regexp.MustCompile(`^\{"id":"[0-9A-Z]+",`)

// TestFlowFlags: atf schedule sends --after (repeated, ID or LAMBDA/ID) and --trigger-rule; atf
// after sends its REFs; a REF that names no task is refused before any call.
func TestFlowFlags(t *testing.T) {
	api := newFakeFlowAPI()
	srv := httptest.NewServer(api)
	defer srv.Close()
	if err := run([]string{"schedule", "echo", "--after", "b", "--after", "join/c", "--trigger-rule", "all_done", "--endpoint", srv.URL}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"after", "echo", "d", "b", "other/c", "--endpoint", srv.URL}, io.Discard); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/v1/lambdas/echo/tasks":         `{"after":[{"lambda":"","id":"b"},{"lambda":"join","id":"c"}],"trigger_rule":"all_done"}`,
		"/v1/lambdas/echo/tasks/d/after": `{"after":[{"lambda":"","id":"b"},{"lambda":"other","id":"c"}]}`,
	} {
		got := api.posts[path]
		if path == "/v1/lambdas/echo/tasks" {
			// The client names a task it schedules, so that a retry replays it.
			var withID string
			if withID, got = got, clientID.ReplaceAllString(got, "{"); withID == got {
				t.Errorf("POST %s: %s, want an id chosen by the client", path, withID)
			}
		}
		if got != want {
			t.Errorf("POST %s: %s, want %s", path, got, want)
		}
	}
	calls := api.calls
	for _, args := range [][]string{
		{"schedule", "echo", "--after", "a/"},
		{"schedule", "echo", "--after", "/a"},
		{"after", "echo", "d", "a/b/c"},
		{"after", "echo", "d"},
	} {
		if err := run(append(args, "--endpoint", srv.URL), io.Discard); err == nil {
			t.Errorf("%v was taken", args)
		}
	}
	if api.calls != calls {
		t.Errorf("bad arguments made %d calls", api.calls-calls)
	}
}
