package local_test

// The acceptance tests of task flows (issue 12), end to end through the HTTP API and the Go
// client, each on the embedded store and on DynamoDB and SQS: a diamond across two lambdas, a
// chain of 100, a fan-in of 10,000 (1,000 on the emulators), a failure in a chain, all_done,
// refused graphs and replays, AddUpstreams, and a program handler's envelope.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/chaostest"
	"github.com/openatf/atf/shared/testkit/history"
	"github.com/openatf/atf/shared/worker"
)

// flowStack starts a stack on b that runs handlers, and returns its client.
func flowStack(t *testing.T, b backend, handlers map[string]worker.Handler) *client.Client {
	mux := worker.NewMux()
	for l, h := range handlers {
		mux.Handle(l, h)
	}
	return chaostest.Start(t, local.Config{Mux: mux, Store: b.store, Queue: b.queue, Concurrency: 8, Task: chaostest.Timing(b.aws), MessageTimesLease: b.aws})
}

// nest is a handler whose result is its id followed by its upstreams' results in its after's
// order, in parentheses: in a diamond A → {B, C} → D, D's result is "D(B(A()),C(A()))". An
// upstream that did not succeed shows as its id and status ("A!fatal_failure"). A payload of
// {"fail": true} fails the task fatally.
var nest = worker.HandlerFunc(func(_ context.Context, t worker.Task) (json.RawMessage, error) {
	var p struct{ Fail bool }
	if len(t.Payload) > 0 {
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return nil, worker.Fatal(err)
		}
	}
	if p.Fail {
		return nil, worker.Fatal(fmt.Errorf("%s fails, as asked", t.ID))
	}
	parts := make([]string, len(t.Inputs))
	for i, in := range t.Inputs {
		if in.Status != task.StatusSuccess {
			parts[i] = in.ID + "!" + string(in.Status)
			continue
		}
		if err := json.Unmarshal(in.Result, &parts[i]); err != nil {
			return nil, worker.Fatal(fmt.Errorf("the result of %s: %w", in.ID, err))
		}
	}
	return json.Marshal(t.ID + "(" + strings.Join(parts, ",") + ")")
})

var fail = json.RawMessage(`{"fail":true}`)

// flowTimeout bounds a test's wait for n tasks: generous, as a loaded machine is slow, and the
// emulators far slower. A graph's tasks run a layer after another, each layer a few consumer
// passes behind the last, and faults retry with backoff: one long chaos run on a machine loaded
// by another suite took 3 minutes and a half for 5,000 tasks (61 s unloaded), all of them ended.
func flowTimeout(b backend, n int) time.Duration {
	per := 40 * time.Millisecond
	if b.aws {
		per = 500 * time.Millisecond
	}
	return 2*time.Minute + time.Duration(n)*per
}

// waitEnded polls a task until it is terminal, and returns it.
func waitEnded(t *testing.T, c *client.Client, ref task.Ref, timeout time.Duration) task.Task {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		tk, err := c.Get(t.Context(), ref.Lambda, ref.ID)
		if err == nil && tk.Status.Terminal() {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ended after %s: %s (%v)", ref, timeout, tk.Status, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// resultString decodes a task's result as a JSON string.
func resultString(t *testing.T, tk task.Task) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(tk.Result, &s); err != nil {
		t.Fatalf("%s: result %s: %v", tk.ID, tk.Result, err)
	}
	return s
}

// A diamond A → {B, C} → D across two lambdas, scheduled in one batch: D's handler gets B's and
// C's results, each built from A's.
func testFlowDiamond(t *testing.T, b backend) {
	c := flowStack(t, b, map[string]worker.Handler{"fa": nest, "fb": nest})
	g := &client.Graph{Lambda: "fa"}
	a := g.Add(client.ScheduleRequest{ID: "a"})
	bc := g.Group([]task.Ref{a}, client.ScheduleRequest{ID: "b", Lambda: "fb"}, client.ScheduleRequest{ID: "c"})
	d := g.Add(client.ScheduleRequest{ID: "d", Lambda: "fb"}, bc...)
	tasks, created, err := c.ScheduleGraph(t.Context(), g)
	if err != nil || !created || len(tasks) != 4 {
		t.Fatalf("schedule: %d tasks, created %v, %v", len(tasks), created, err)
	}
	if tasks[3].Status != task.StatusPending || len(tasks[3].After) != 2 {
		t.Fatalf("d scheduled %s after %v, want pending after b and c", tasks[3].Status, tasks[3].After)
	}
	done := waitEnded(t, c, d, flowTimeout(b, 4))
	if done.Status != task.StatusSuccess || resultString(t, done) != "d(b(a()),c(a()))" {
		t.Fatalf("d ended %s with %s, want success with d(b(a()),c(a()))", done.Status, done.Result)
	}
}

func TestFlowDiamond(t *testing.T)    { testFlowDiamond(t, embedded(t)) }
func TestFlowDiamondAWS(t *testing.T) { testFlowDiamond(t, emulated(t, "fa", "fb")) }

// A chain of 100 (in one batch; 50 on the emulators, where each link takes about a second), its
// links alternating between two lambdas: the last link's result holds every link's, in order.
func testFlowChain(t *testing.T, b backend, n int) {
	c := flowStack(t, b, map[string]worker.Handler{"fa": nest, "fb": nest})
	g := &client.Graph{Lambda: "fa"}
	reqs := make([]client.ScheduleRequest, n)
	want := ""
	for i := range reqs {
		reqs[i] = client.ScheduleRequest{ID: fmt.Sprintf("c-%03d", i)}
		if i%2 == 1 {
			reqs[i].Lambda = "fb"
		}
		want = reqs[i].ID + "(" + want + ")"
	}
	chain := g.Chain(nil, reqs...)
	if _, _, err := c.ScheduleGraph(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	done := waitEnded(t, c, chain[n-1], flowTimeout(b, 4*n))
	if done.Status != task.StatusSuccess || resultString(t, done) != want {
		t.Fatalf("the chain's end ended %s with %s, want success with %s", done.Status, done.Result, want)
	}
}

func TestFlowChain(t *testing.T)    { testFlowChain(t, embedded(t), 100) }
func TestFlowChainAWS(t *testing.T) { testFlowChain(t, emulated(t, "fa", "fb"), 50) }

// A fan-in of n tasks into one: the upstreams are scheduled in batches of 100, then the
// downstream with every one of them in its after, in one request. Its handler gets n inputs,
// each a success with its upstream's result.
func testFlowFanIn(t *testing.T, b backend, n int) {
	count := worker.HandlerFunc(func(_ context.Context, t worker.Task) (json.RawMessage, error) {
		ok := 0
		for _, in := range t.Inputs {
			var s string
			if in.Status == task.StatusSuccess && json.Unmarshal(in.Result, &s) == nil && s == in.ID+"()" {
				ok++
			}
		}
		return json.Marshal(map[string]int{"inputs": len(t.Inputs), "ok": ok})
	})
	c := flowStack(t, b, map[string]worker.Handler{"up": nest, "sink": count})
	after := make([]task.Ref, n)
	for i := 0; i < n; i += task.MaxBatch {
		var reqs []client.ScheduleRequest
		for j := i; j < min(i+task.MaxBatch, n); j++ {
			reqs = append(reqs, client.ScheduleRequest{ID: fmt.Sprintf("u-%05d", j)})
			after[j] = task.Ref{Lambda: "up", ID: reqs[len(reqs)-1].ID}
		}
		if _, _, err := c.ScheduleBatch(t.Context(), "up", reqs); err != nil {
			t.Fatal(err)
		}
	}
	sink, _, err := c.Schedule(t.Context(), "sink", client.ScheduleRequest{ID: "sink", After: after})
	if err != nil {
		t.Fatal(err)
	}
	if sink.Status.Terminal() || len(sink.After) != n {
		t.Fatalf("sink scheduled %s with %d upstreams, want %d", sink.Status, len(sink.After), n)
	}
	done := waitEnded(t, c, sink.Ref(), flowTimeout(b, n))
	want := fmt.Sprintf(`{"inputs":%d,"ok":%d}`, n, n)
	if done.Status != task.StatusSuccess || compact(done.Result) != want {
		t.Fatalf("sink ended %s with %s, want success with %s", done.Status, done.Result, want)
	}
}

func TestFlowFanIn(t *testing.T) { testFlowFanIn(t, embedded(t), 10000) }

// TestFlowFanInAWS runs a fan-in of 1,000 under `make chaos` (about 5 minutes: moto runs a few
// tasks a second), and of 200 in `make test`. The store's own fan-in of 1,000 on DynamoDB Local
// is in the conformance suite (storetest.Fan), which `make test` runs.
func TestFlowFanInAWS(t *testing.T) {
	n := 200
	if long() {
		n = 1000
	}
	testFlowFanIn(t, emulated(t, "up", "sink"), n)
}

func compact(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// A chain of 10 whose fourth link fails fatally: the three before it succeed, and every link
// after it ends upstream_failed, naming its own upstream and how that ended.
func testFlowFailure(t *testing.T, b backend) {
	c := flowStack(t, b, map[string]worker.Handler{"fa": nest, "fb": nest})
	g := &client.Graph{Lambda: "fa"}
	reqs := make([]client.ScheduleRequest, 10)
	for i := range reqs {
		reqs[i] = client.ScheduleRequest{ID: fmt.Sprintf("f-%d", i), Lambda: []string{"fa", "fb"}[i%2]}
	}
	reqs[3].Payload = fail
	chain := g.Chain(nil, reqs...)
	if _, _, err := c.ScheduleGraph(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	for i, ref := range chain {
		done := waitEnded(t, c, ref, flowTimeout(b, 10))
		switch {
		case i < 3:
			if done.Status != task.StatusSuccess {
				t.Errorf("%s ended %s (%s), want success", ref, done.Status, done.Error)
			}
		case i == 3:
			if done.Status != task.StatusFatalFailure {
				t.Errorf("%s ended %s, want fatal_failure", ref, done.Status)
			}
		default:
			upStatus := task.StatusUpstreamFailed
			if i == 4 {
				upStatus = task.StatusFatalFailure
			}
			cause := fmt.Sprintf("upstream %s ended %s", chain[i-1], upStatus)
			if done.Status != task.StatusUpstreamFailed || !strings.Contains(done.Error, cause) || done.Attempts != 0 {
				t.Errorf("%s ended %s after %d attempts, error %q; want upstream_failed, never run, with %q", ref, done.Status, done.Attempts, done.Error, cause)
			}
		}
	}
}

func TestFlowFailure(t *testing.T)    { testFlowFailure(t, embedded(t)) }
func TestFlowFailureAWS(t *testing.T) { testFlowFailure(t, emulated(t, "fa", "fb")) }

// A task under all_done runs after one upstream failed and another succeeded, and sees how each
// ended; one under all_success beside it ends upstream_failed.
func testFlowAllDone(t *testing.T, b backend) {
	c := flowStack(t, b, map[string]worker.Handler{"fa": nest})
	g := &client.Graph{Lambda: "fa"}
	bad := g.Add(client.ScheduleRequest{ID: "bad", Payload: fail})
	good := g.Add(client.ScheduleRequest{ID: "good"})
	anyway := g.Add(client.ScheduleRequest{ID: "anyway", TriggerRule: task.TriggerAllDone}, bad, good)
	strict := g.Add(client.ScheduleRequest{ID: "strict"}, bad, good)
	if _, _, err := c.ScheduleGraph(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	done := waitEnded(t, c, anyway, flowTimeout(b, 4))
	if done.Status != task.StatusSuccess || resultString(t, done) != "anyway(bad!fatal_failure,good())" {
		t.Errorf("anyway ended %s with %s, want success with anyway(bad!fatal_failure,good())", done.Status, done.Result)
	}
	if done.TriggerRule() != task.TriggerAllDone {
		t.Errorf("anyway's trigger rule shows as %q", done.TriggerRule())
	}
	if s := waitEnded(t, c, strict, flowTimeout(b, 4)); s.Status != task.StatusUpstreamFailed || !strings.Contains(s.Error, "fa/bad ended fatal_failure") {
		t.Errorf("strict ended %s (%s), want upstream_failed naming fa/bad", s.Status, s.Error)
	}
}

func TestFlowAllDone(t *testing.T)    { testFlowAllDone(t, embedded(t)) }
func TestFlowAllDoneAWS(t *testing.T) { testFlowAllDone(t, emulated(t, "fa")) }

// apiError is err as the API's error answer, or fails the test.
func apiError(t *testing.T, err error) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an API error", err)
	}
	return e
}

// Batches that cannot be scheduled are refused whole with 422 naming the tasks at fault: a cycle,
// an upstream that does not exist. A graph scheduled again answers 200 and creates nothing more.
func testFlowRefused(t *testing.T, b backend) {
	c := flowStack(t, b, map[string]worker.Handler{"fa": nest, "fb": nest})
	lambdaTasks := func() int {
		n := 0
		for _, l := range []string{"fa", "fb"} {
			fs, err := chaostest.List(c, l)
			if err != nil {
				t.Fatal(err)
			}
			n += len(fs)
		}
		return n
	}

	cycle := []client.ScheduleRequest{
		{ID: "x", After: []task.Ref{{ID: "z"}}},
		{ID: "y", Lambda: "fb", After: []task.Ref{{Lambda: "fa", ID: "x"}}},
		{ID: "z", After: []task.Ref{{Lambda: "fb", ID: "y"}}},
		{ID: "free"},
	}
	_, _, err := c.ScheduleBatch(t.Context(), "fa", cycle)
	if e := apiError(t, err); e.Status != http.StatusUnprocessableEntity || !strings.Contains(e.Message, "fa/x") || !strings.Contains(e.Message, "fb/y") || !strings.Contains(e.Message, "fa/z") {
		t.Errorf("a cycle: %v, want 422 naming fa/x, fb/y and fa/z", err)
	}
	missing := []client.ScheduleRequest{{ID: "m1"}, {ID: "m2", After: []task.Ref{{ID: "m1"}, {Lambda: "fb", ID: "nowhere"}}}}
	_, _, err = c.ScheduleBatch(t.Context(), "fa", missing)
	if e := apiError(t, err); e.Status != http.StatusUnprocessableEntity || !strings.Contains(e.Message, "fb/nowhere") {
		t.Errorf("a missing upstream: %v, want 422 naming fb/nowhere", err)
	}
	if n := lambdaTasks(); n != 0 {
		t.Fatalf("%d tasks after refused batches, want none", n)
	}

	g := &client.Graph{Lambda: "fa"}
	head := g.Chain(nil, client.ScheduleRequest{}, client.ScheduleRequest{Lambda: "fb"})
	g.Chord(head[1:], []client.ScheduleRequest{{}, {}, {Lambda: "fb"}}, client.ScheduleRequest{})
	first, created, err := c.ScheduleGraph(t.Context(), g)
	if err != nil || !created {
		t.Fatalf("schedule: created %v, %v", created, err)
	}
	for range 2 { // once while it runs, once after
		again, created, err := c.ScheduleGraph(t.Context(), g)
		if err != nil || created || len(again) != len(first) {
			t.Fatalf("replay: %d tasks, created %v, %v; want the %d tasks, not created", len(again), created, err, len(first))
		}
		for i := range again {
			if again[i].ID != first[i].ID || again[i].CreatedAt != first[i].CreatedAt {
				t.Errorf("replay: task %d is %s created %s, want %s created %s", i, again[i].ID, again[i].CreatedAt, first[i].ID, first[i].CreatedAt)
			}
		}
		waitEnded(t, c, first[len(first)-1].Ref(), flowTimeout(b, len(first)))
	}
	if n := lambdaTasks(); n != len(first) {
		t.Errorf("%d tasks after a graph of %d and its replays", n, len(first))
	}
	// Each upstream lists its downstreams once.
	downs, _, err := c.Downstreams(t.Context(), head[1].Lambda, head[1].ID, "", 0)
	if err != nil || len(downs) != 3 {
		t.Errorf("the chord's upstream lists %d downstreams (%v), want 3", len(downs), err)
	}
}

func TestFlowRefused(t *testing.T)    { testFlowRefused(t, embedded(t)) }
func TestFlowRefusedAWS(t *testing.T) { testFlowRefused(t, emulated(t, "fa", "fb")) }

// AddUpstreams makes a task that has not started wait: new, held by a paused gate, or pending.
// The task then runs only after its new upstream, with its result. An addition that would close
// a cycle is refused with 422.
func testFlowAddUpstreams(t *testing.T, b backend) {
	c := flowStack(t, b, map[string]worker.Handler{"fa": nest, "held": nest})
	if _, err := c.SetGate(t.Context(), "held", "", task.GatePause); err != nil {
		t.Fatal(err)
	}
	// x is new (its lambda is paused); u, its new upstream, is new too.
	schedule := func(lambda string, r client.ScheduleRequest) task.Task {
		tk, _, err := c.Schedule(t.Context(), lambda, r)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	u := schedule("held", client.ScheduleRequest{ID: "u"})
	x := schedule("held", client.ScheduleRequest{ID: "x"})
	// p is pending, after u; v becomes its second upstream.
	p := schedule("fa", client.ScheduleRequest{ID: "p", After: []task.Ref{u.Ref()}})
	v := schedule("held", client.ScheduleRequest{ID: "v"})

	got, err := c.AddUpstreams(t.Context(), "held", "x", []task.Ref{{Lambda: "held", ID: "u"}})
	if err != nil || got.Status != task.StatusPending || len(got.After) != 1 {
		t.Fatalf("add u to x: %s with %d upstreams, %v; want pending after u", got.Status, len(got.After), err)
	}
	got, err = c.AddUpstreams(t.Context(), "fa", "p", []task.Ref{v.Ref()})
	if err != nil || got.Status != task.StatusPending || len(got.After) != 2 {
		t.Fatalf("add v to p: %s with %d upstreams, %v; want pending after u and v", got.Status, len(got.After), err)
	}
	// u → x already; x → u would close a cycle. So would p → ... → p through v.
	_, err = c.AddUpstreams(t.Context(), "held", "u", []task.Ref{x.Ref()})
	if e := apiError(t, err); e.Status != http.StatusUnprocessableEntity || !strings.Contains(e.Message, "held/u") || !strings.Contains(e.Message, "held/x") {
		t.Errorf("a cycle by AddUpstreams: %v, want 422 naming held/u and held/x", err)
	}
	_, err = c.AddUpstreams(t.Context(), "held", "v", []task.Ref{p.Ref()})
	if e := apiError(t, err); e.Status != http.StatusUnprocessableEntity || !strings.Contains(e.Message, "fa/p") {
		t.Errorf("a cycle by AddUpstreams: %v, want 422 naming fa/p", err)
	}

	if _, err := c.SetGate(t.Context(), "held", "", task.GateOpen); err != nil {
		t.Fatal(err)
	}
	if done := waitEnded(t, c, x.Ref(), flowTimeout(b, 4)); done.Status != task.StatusSuccess || resultString(t, done) != "x(u())" {
		t.Errorf("x ended %s with %s, want success with x(u())", done.Status, done.Result)
	}
	if done := waitEnded(t, c, p.Ref(), flowTimeout(b, 4)); done.Status != task.StatusSuccess || resultString(t, done) != "p(u(),v())" {
		t.Errorf("p ended %s with %s, want success with p(u(),v())", done.Status, done.Result)
	}
	// A task that has ended takes no upstreams.
	_, err = c.AddUpstreams(t.Context(), "fa", "p", []task.Ref{{Lambda: "held", ID: "x"}})
	if e := apiError(t, err); e.Status < 400 || e.Status == http.StatusInternalServerError {
		t.Errorf("add to an ended task: %v, want a refusal", err)
	}
}

func TestFlowAddUpstreams(t *testing.T)    { testFlowAddUpstreams(t, embedded(t)) }
func TestFlowAddUpstreamsAWS(t *testing.T) { testFlowAddUpstreams(t, emulated(t, "fa", "held")) }

// A program handler gets its payload bare when its task has no upstreams, and the envelope
// {"payload": ..., "upstreams": [...]} with ATF_ENVELOPE=1 when it has.
func testFlowProgram(t *testing.T, b backend) {
	path := filepath.Join(t.TempDir(), "prog")
	script := "#!/bin/sh\nprintf '{\"envelope\":\"%s\",\"stdin\":%s}' \"$ATF_ENVELOPE\" \"$(cat)\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := flowStack(t, b, map[string]worker.Handler{"prog": worker.Program{Path: path}})
	g := &client.Graph{Lambda: "prog"}
	up := g.Add(client.ScheduleRequest{ID: "up", Payload: json.RawMessage(`{"n":1}`)})
	down := g.Add(client.ScheduleRequest{ID: "down", Payload: json.RawMessage(`{"n":2}`)}, up)
	if _, _, err := c.ScheduleGraph(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	upWant := `{"envelope":"","stdin":{"n":1}}`
	downWant := `{"envelope":"1","stdin":{"payload":{"n":2},"upstreams":[{"id":"up","lambda":"prog","result":` + upWant + `,"status":"success"}]}}`
	if done := waitEnded(t, c, up, flowTimeout(b, 2)); done.Status != task.StatusSuccess || compact(done.Result) != upWant {
		t.Errorf("up ended %s with %s, want %s", done.Status, done.Result, upWant)
	}
	if done := waitEnded(t, c, down, flowTimeout(b, 2)); done.Status != task.StatusSuccess || compact(done.Result) != downWant {
		t.Errorf("down ended %s with %s (%s), want %s", done.Status, done.Result, done.Error, downWant)
	}
}

func TestFlowProgram(t *testing.T)    { testFlowProgram(t, embedded(t)) }
func TestFlowProgramAWS(t *testing.T) { testFlowProgram(t, emulated(t, "prog")) }

// dagSize is the flow scenario's number of tasks: 300 embedded and 60 on the emulators in `make
// test`; under `make chaos`, ATF_CHAOS_TASKS up to 5,000 embedded, and a twentieth of it up to
// 1,000 on the emulators, which run a few tasks a second.
func dagSize(b backend) int {
	if b.aws {
		return min(chaosTasks(60, 20), 1000)
	}
	return min(chaosTasks(300, 1), 5000)
}

// A random layered DAG over two lambdas (chaostest.RandomDAG: fan-in and fan-out, some tasks
// all_done, a few failing fatally), scheduled in batches that refer to earlier ones, runs while
// every message comes with extra copies and 5% of store calls fail, half after their write went
// through. Each handler checks that its upstreams had ended as its trigger rule wants when it
// started, with their results; the history shows no task started before its upstreams ended,
// none ran twice at once, and each ended as the graph says: success, fatal_failure, or
// upstream_failed downstream of a failure.
func testChaosFlow(t *testing.T, b backend) {
	lambdas := []string{"dag1", "dag2"}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	dag := chaostest.RandomDAG(rand.New(rand.NewPCG(seed, 1)), dagSize(b), lambdas)
	want := dag.Want()

	moves := &chaostest.Moves{Store: b.store}
	faulty := &chaostest.FaultyStore{Store: moves, Rate: 0.05}
	dup := &chaostest.Duplicating{Queue: b.queue}
	h := &chaostest.History{}
	node := &chaostest.FlowNode{History: h, Worker: "1", Work: func(ctx context.Context, tk worker.Task) error {
		return chaostest.Sleep(time.Duration(rand.IntN(3))*10*time.Millisecond, nil)(ctx, tk)
	}}
	mux := worker.NewMux()
	for _, l := range lambdas {
		mux.Handle(l, node)
	}
	c := chaostest.Start(t, local.Config{Mux: mux, Store: faulty, Queue: dup, Concurrency: 16, Task: chaostest.Timing(b.aws), MessageTimesLease: b.aws})
	// Batches of 10: a replay reads each task of its batch, and with 5% of reads failing, one of
	// 100 would rarely get through.
	for _, batch := range dag.Batches(10) {
		var err error
		for try := 0; try < 50; try++ { // a failed request is replayed: all or none, then 200
			if _, _, err = c.ScheduleBatch(t.Context(), "dag1", batch); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("schedule %s...: %v", batch[0].ID, err)
		}
	}

	var observed [][]history.Final
	var finals []history.Final
	perLambda := map[string]int{}
	for _, tk := range dag.Tasks {
		perLambda[tk.Lambda]++
	}
	for _, l := range lambdas {
		o, last := chaostest.Wait(t, c, l, perLambda[l], flowTimeout(b, len(dag.Tasks)))
		observed, finals = append(observed, o...), append(finals, last...)
	}
	execs := h.Executions()
	r := history.CheckEach(execs, nil, observed, finals, func(id string) task.Status { return want[id] })
	r.Faults = faulty.Faults() + dup.Copies()
	wrong := slices.Concat(node.Violations(), dag.Early(execs))
	doubles := moves.Doubles()
	ended := map[task.Status]int{}
	for _, s := range want {
		ended[s]++
	}
	allDone := 0
	for _, tk := range dag.Tasks {
		if tk.AllDone {
			allDone++
		}
	}
	chaostest.Report(t, "flow dag ("+b.name+")", r, fmt.Sprintf(" early=%d double_moves=%d succeeded=%d failed=%d upstream_failed=%d all_done=%d",
		len(wrong), len(doubles), ended[task.StatusSuccess], ended[task.StatusFatalFailure], ended[task.StatusUpstreamFailed], allDone))
	if len(wrong) > 0 {
		t.Errorf("runs let start before their upstreams allowed, or with wrong inputs: %v", wrong[:min(len(wrong), 10)])
	}
	if len(doubles) > 0 {
		t.Errorf("double transitions: %v", doubles[:min(len(doubles), 10)])
	}
	if r.Tasks != len(dag.Tasks) || faulty.Faults() == 0 || dup.Copies() == 0 {
		t.Errorf("%d tasks of %d, %d store faults, %d extra messages", r.Tasks, len(dag.Tasks), faulty.Faults(), dup.Copies())
	}
}

func TestChaosFlow(t *testing.T)    { testChaosFlow(t, embedded(t)) }
func TestChaosFlowAWS(t *testing.T) { testChaosFlow(t, emulated(t, "dag1", "dag2")) }
