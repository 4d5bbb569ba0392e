package client

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/task"
)

// TestGraph: the builders give each task its upstreams (those its request named first), assign
// ids only where none was given, leave the caller's requests alone, and name each task with the
// batch's lambda unless its request gives its own.
func TestGraph(t *testing.T) {
	g := &Graph{Lambda: "l"}
	own := []task.Ref{{Lambda: "other", ID: "x"}}
	root := g.Add(ScheduleRequest{ID: "root"})
	chain := g.Chain([]task.Ref{root}, ScheduleRequest{After: own}, ScheduleRequest{Lambda: "m"})
	group := g.Group(nil, ScheduleRequest{ID: "g1"}, ScheduleRequest{ID: "g2", TriggerRule: task.TriggerAllDone})
	header := []ScheduleRequest{{ID: "h1"}, {ID: "h2"}}
	cb := g.Chord(group, header, ScheduleRequest{ID: "cb", TriggerRule: task.TriggerAllDone})

	reqs := g.Requests()
	if len(reqs) != 8 {
		t.Fatalf("%d requests, want 8", len(reqs))
	}
	if own[0] != (task.Ref{Lambda: "other", ID: "x"}) || len(own) != 1 || len(header[0].After) != 0 {
		t.Fatal("the builders changed the caller's requests")
	}
	for i, id := range []string{chain[0].ID, chain[1].ID} {
		if len(id) != 26 || reqs[1+i].ID != id {
			t.Errorf("chain task %d: id %q, want a generated one", i, id)
		}
	}
	if chain[0].ID == chain[1].ID {
		t.Error("two generated ids are equal")
	}
	want := map[string][]task.Ref{
		"root":      nil,
		chain[0].ID: {{Lambda: "other", ID: "x"}, {Lambda: "l", ID: "root"}},
		chain[1].ID: {{Lambda: "l", ID: chain[0].ID}},
		"g1":        nil,
		"g2":        nil,
		"h1":        {{Lambda: "l", ID: "g1"}, {Lambda: "l", ID: "g2"}},
		"h2":        {{Lambda: "l", ID: "g1"}, {Lambda: "l", ID: "g2"}},
		"cb":        {{Lambda: "l", ID: "h1"}, {Lambda: "l", ID: "h2"}},
	}
	for _, r := range reqs {
		if w, ok := want[r.ID]; !ok || !slices.Equal(r.After, w) {
			t.Errorf("%s after %v, want %v", r.ID, r.After, w)
		}
	}
	if chain[1].Lambda != "m" || cb != (task.Ref{Lambda: "l", ID: "cb"}) || reqs[4].TriggerRule != task.TriggerAllDone || reqs[7].TriggerRule != task.TriggerAllDone {
		t.Errorf("names or trigger rules lost: %v %v %+v %+v", chain[1], cb, reqs[4], reqs[7])
	}
}

// TestScheduleGraph: a graph goes in one batch request to its lambda, upstreams as
// {"lambda","id"} and the trigger rule by its name; the same graph sent again is the same body.
// A graph over task.MaxBatch tasks is refused without a call.
func TestScheduleGraph(t *testing.T) {
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/lambdas/l/tasks/batch" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"tasks":[{"id":"a"},{"id":"b","after":[{"lambda":"l","id":"a"}],"trigger_rule":"all_done"}]}`)
	}))
	defer srv.Close()
	c := &Client{Endpoint: srv.URL, HTTP: srv.Client()}
	g := &Graph{Lambda: "l"}
	a := g.Add(ScheduleRequest{ID: "a"})
	g.Add(ScheduleRequest{Lambda: "m", TriggerRule: task.TriggerAllDone}, a)
	for range 2 {
		tasks, created, err := c.ScheduleGraph(t.Context(), g)
		if err != nil || !created || len(tasks) != 2 || tasks[1].After[0] != a || tasks[1].Trigger != task.TriggerAllDone {
			t.Fatalf("got %+v, %v, %v", tasks, created, err)
		}
	}
	var body struct{ Tasks []map[string]any }
	if err := json.Unmarshal([]byte(bodies[0]), &body); err != nil {
		t.Fatal(err)
	}
	second, _ := json.Marshal(body.Tasks[1])
	if !strings.Contains(string(second), `"after":[{"id":"a","lambda":"l"}]`) || !strings.Contains(string(second), `"lambda":"m"`) ||
		!strings.Contains(string(second), `"trigger_rule":"all_done"`) {
		t.Errorf("batch body %s", bodies[0])
	}
	if bodies[0] != bodies[1] {
		t.Errorf("the same graph sent twice differs:\n%s\n%s", bodies[0], bodies[1])
	}

	big := &Graph{Lambda: "l"}
	for range task.MaxBatch + 1 {
		big.Add(ScheduleRequest{})
	}
	if _, _, err := c.ScheduleGraph(t.Context(), big); err == nil || len(bodies) != 2 {
		t.Errorf("a graph of %d tasks: %v after %d calls", task.MaxBatch+1, err, len(bodies))
	}
}

// TestFlowCalls: AddUpstreams posts {"after": [...]} to the task's after; Downstreams sends the
// cursor and limit and reads the page.
func TestFlowCalls(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/lambdas/l/tasks/d/after":
			b, _ := io.ReadAll(r.Body)
			if string(b) != `{"after":[{"lambda":"","id":"a"},{"lambda":"m","id":"b"}]}` {
				t.Errorf("after body %s", b)
			}
			io.WriteString(w, `{"id":"d","status":"pending","after":[{"lambda":"l","id":"a"},{"lambda":"m","id":"b"}]}`)
		case "GET /v1/lambdas/l/tasks/a/downstreams":
			if q := r.URL.Query(); q.Get("cursor") != "c1" || q.Get("limit") != "2" {
				t.Errorf("downstreams query %s", r.URL.RawQuery)
			}
			io.WriteString(w, `{"downstreams":[{"lambda":"l","id":"d","status":"pending"},{"lambda":"m","id":"e","status":"upstream_failed"}],"next_cursor":"c2"}`)
		default:
			t.Errorf("%s %s", r.Method, r.URL)
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c := &Client{Endpoint: srv.URL, HTTP: srv.Client()}
	tk, err := c.AddUpstreams(t.Context(), "l", "d", []task.Ref{{ID: "a"}, {Lambda: "m", ID: "b"}})
	if err != nil || tk.Status != task.StatusPending || len(tk.After) != 2 {
		t.Fatalf("AddUpstreams: %+v, %v", tk, err)
	}
	downs, next, err := c.Downstreams(t.Context(), "l", "a", "c1", 2)
	want := []Downstream{{"l", "d", task.StatusPending}, {"m", "e", task.StatusUpstreamFailed}}
	if err != nil || next != "c2" || !slices.Equal(downs, want) || downs[1].Ref() != (task.Ref{Lambda: "m", ID: "e"}) {
		t.Fatalf("Downstreams: %v, %q, %v", downs, next, err)
	}
}
