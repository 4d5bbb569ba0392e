package statusfn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
)

// never is a linger longer than any test: a batch then goes only when it is full.
const never = time.Hour

// recorder is the status function as a worker reaches it: it keeps every payload it was given
// and the size of every answer, and, when hold is set, keeps each invocation waiting until hold
// is closed.
type recorder struct {
	statusfn.Invoker
	hold chan struct{}

	mu       sync.Mutex
	payloads []string
	answers  []int
}

func (r *recorder) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	r.mu.Lock()
	r.payloads = append(r.payloads, string(payload))
	r.mu.Unlock()
	if r.hold != nil {
		<-r.hold
	}
	out, err := r.Invoker.Invoke(ctx, payload)
	r.mu.Lock()
	r.answers = append(r.answers, len(out))
	r.mu.Unlock()
	return out, err
}

// batches returns how many invocations carried a batch, and how many a single request.
func (r *recorder) batches() (batches, singles int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.payloads {
		if strings.HasPrefix(p, `{"v":2,`) {
			batches++
		} else {
			singles++
		}
	}
	return batches, singles
}

func (r *recorder) invocations() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.payloads)
}

// together runs f(i) for i in [0, n) at once and waits for all of them.
func together(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

// TestBatch: each request of a batch is answered on its own, in order, as it would be alone:
// one task's refusal fails no other, and what succeeded is in the store.
func TestBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fixture(t, "enq", task.StatusEnqueued, "")
	e.fixture(t, "run", task.StatusProcessing, eventLease)
	e.fixture(t, "done", task.StatusProcessing, eventLease)
	reqs := []statusfn.Request{
		{V: 1, Op: statusfn.OpClaim, Lambda: "echo", TaskID: "enq", Delivery: "d1"},
		{V: 1, Op: statusfn.OpClaim, Lambda: "echo", TaskID: "missing"},
		{V: 1, Op: statusfn.OpHeartbeat, Lambda: "echo", TaskID: "run", Lease: "SOMEONEELSESLEASE234567ABC"},
		{V: 1, Op: statusfn.OpHeartbeat, Lambda: "echo", TaskID: "run"},
		{V: 1, Op: statusfn.OpSetResult, Lambda: "echo", TaskID: "done", Lease: eventLease, Outcome: status.Success, Result: json.RawMessage(`{"ok":true}`)},
		{V: 3, Op: statusfn.OpRelease, Lambda: "echo", TaskID: "run", Lease: eventLease},
		{V: 2, Requests: []statusfn.Request{{V: 1, Op: statusfn.OpRelease, Lambda: "echo", TaskID: "run", Lease: eventLease}}},
		{V: 1, Op: statusfn.OpHeartbeat, Lambda: "echo", TaskID: "run", Lease: eventLease},
	}
	want := []string{"", "not_found", "stale_lease", "invalid", "", "invalid", "invalid", ""}
	payload, err := json.Marshal(statusfn.Request{V: statusfn.BatchVersion, Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	out, err := statusfn.LocalInvoker{Handler: e.h}.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatal(err)
	}
	var resp statusfn.Response
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.V != statusfn.BatchVersion || resp.Error != nil || len(resp.Responses) != len(reqs) {
		t.Fatalf("the batch was answered %s", out)
	}
	for i, r := range resp.Responses {
		code := ""
		if r.Error != nil {
			code = r.Error.Code
		}
		if code != want[i] || r.V != statusfn.Version {
			t.Errorf("request %d (%s of %s) answered %+v, want code %q", i, reqs[i].Op, reqs[i].TaskID, r, want[i])
		}
	}
	if claimed := e.get(t, "enq"); resp.Responses[0].Lease == "" || resp.Responses[0].Lease != claimed.Lease || claimed.Status != task.StatusProcessing {
		t.Errorf("the claim answered lease %q; stored %s, lease %q", resp.Responses[0].Lease, claimed.Status, claimed.Lease)
	}
	if string(resp.Responses[0].Task.Payload) != `{"to":"someone"}` {
		t.Errorf("the claim's answer lacks the payload: %+v", resp.Responses[0].Task)
	}
	// A result is answered without itself, which the worker has; the store keeps it.
	if r := resp.Responses[4].Task; r == nil || r.Status != task.StatusSuccess || len(r.Result) > 0 && string(r.Result) != "null" {
		t.Errorf("set_result answered %+v", r)
	}
	if done := e.get(t, "done"); done.Status != task.StatusSuccess || string(done.Result) != `{"ok":true}` {
		t.Errorf("stored %s with result %s", done.Status, done.Result)
	}
	if run := e.get(t, "run"); run.Status != task.StatusProcessing || run.Lease != eventLease {
		t.Errorf("the refused release moved the task: %+v", run)
	}
}

// TestBatchRefusedWhole: a batch that is empty, too long, or sets more than its requests is
// refused as invalid, in version 2, and nothing in it is served.
func TestBatchRefusedWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fixture(t, "enq", task.StatusEnqueued, "")
	claim := statusfn.Request{V: 1, Op: statusfn.OpClaim, Lambda: "echo", TaskID: "enq", Delivery: "d1"}
	tooMany := make([]statusfn.Request, statusfn.MaxBatchRequests+1)
	for i := range tooMany {
		tooMany[i] = claim
	}
	for name, batch := range map[string]statusfn.Request{
		"empty":    {V: 2},
		"too many": {V: 2, Requests: tooMany},
		"with op":  {V: 2, Op: statusfn.OpClaim, Lambda: "echo", TaskID: "enq", Requests: []statusfn.Request{claim}},
	} {
		resp, err := e.h.Handle(context.Background(), batch)
		if err != nil || resp.V != statusfn.BatchVersion || resp.Error == nil || resp.Error.Code != "invalid" || resp.Responses != nil {
			t.Errorf("%s: answered %+v, %v", name, resp, err)
		}
	}
	if got := e.get(t, "enq"); got.Status != task.StatusEnqueued {
		t.Errorf("a refused batch claimed its task: %s", got.Status)
	}
}

// TestBatchOneLambda: a status function for one lambda checks every request of a batch, and
// refuses those naming another lambda while it serves its own.
func TestBatchOneLambda(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fixture(t, "enq", task.StatusEnqueued, "")
	mail := task.Lambda{Name: "mail"}.WithDefaults()
	now := time.Now().UTC()
	own, err := task.New(task.Spec{ID: "m1"}, mail, now, cfg)
	if err == nil {
		own, err = task.Enqueue(own, now, cfg)
	}
	if err == nil {
		err = e.store.Create(context.Background(), own)
	}
	if err != nil {
		t.Fatal(err)
	}
	h := statusfn.NewLambdaHandler(e.hsc, "mail", slog.New(slog.DiscardHandler))
	resp, _ := h.Handle(context.Background(), statusfn.Request{V: 2, Requests: []statusfn.Request{
		{V: 1, Op: statusfn.OpClaim, Lambda: "echo", TaskID: "enq", Delivery: "d1"},
		{V: 1, Op: statusfn.OpClaim, Lambda: "mail", TaskID: "m1", Delivery: "d2"},
	}})
	if len(resp.Responses) != 2 {
		t.Fatalf("answered %+v", resp)
	}
	if r := resp.Responses[0]; r.Error == nil || r.Error.Code != "invalid" || r.Task != nil {
		t.Errorf("lambda mail's function answered a claim of echo's task: %+v", r)
	}
	if r := resp.Responses[1]; r.Error != nil || r.Lease == "" {
		t.Errorf("lambda mail's function refused its own claim: %+v", r.Error)
	}
	if got := e.get(t, "enq"); got.Status != task.StatusEnqueued {
		t.Errorf("echo's task is %s", got.Status)
	}
}

// TestClientCoalesces: calls made together go out as one invocation, and each caller gets its
// own answer: its claim and lease, or its own refusal.
func TestClientCoalesces(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 10
	for i := range n {
		if i%5 != 4 { // every fifth task is missing
			e.fixture(t, fmt.Sprint("t", i), task.StatusEnqueued, "")
		}
	}
	rec := &recorder{Invoker: statusfn.LocalInvoker{Handler: e.h}}
	c := statusfn.NewClientBatches(rec, never, n)
	ctx := context.Background()
	claimed := make([]task.Task, n)
	errs := make([]error, n)
	together(n, func(i int) {
		claimed[i], errs[i] = c.Claim(ctx, "echo", fmt.Sprint("t", i), fmt.Sprint("receipt-", i), "")
	})
	if b, s := rec.batches(); b != 1 || s != 0 {
		t.Fatalf("%d claims made together took %d batches and %d single invocations, want one batch", n, b, s)
	}
	for i := range n {
		if i%5 == 4 {
			if !errors.Is(errs[i], task.ErrNotFound) {
				t.Errorf("claim of missing task t%d: %v", i, errs[i])
			}
			continue
		}
		stored := e.get(t, fmt.Sprint("t", i))
		if errs[i] != nil || claimed[i].ID != stored.ID || claimed[i].Lease != stored.Lease || stored.Status != task.StatusProcessing {
			t.Errorf("claim of t%d: %+v, %v; stored %s with lease %s", i, claimed[i], errs[i], stored.Status, stored.Lease)
		}
	}

	// Their heartbeats and results share one invocation each too; a result comes back whole.
	// The callers of the missing tasks heartbeat another task, so that each batch fills.
	other := e.fixture(t, "other", task.StatusProcessing, eventLease)
	for range 2 {
		together(n, func(i int) {
			if i%5 == 4 {
				errs[i] = c.Heartbeat(ctx, "echo", other.ID, other.Lease)
			} else if errs[i] == nil {
				errs[i] = c.Heartbeat(ctx, "echo", claimed[i].ID, claimed[i].Lease)
			}
		})
	}
	results := make([]task.Task, n)
	together(n, func(i int) {
		if i%5 == 4 {
			errs[i] = c.Heartbeat(ctx, "echo", other.ID, other.Lease)
		} else if errs[i] == nil {
			results[i], errs[i] = c.SetResult(ctx, "echo", claimed[i].ID, claimed[i].Lease,
				status.Result{Outcome: status.Success, Result: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
		}
	})
	if b, s := rec.batches(); b != 4 || s != 0 {
		t.Errorf("claims, two rounds of heartbeats and results took %d batches and %d single invocations, want 4 batches", b, s)
	}
	for i := range n {
		if i%5 == 4 {
			if errs[i] != nil {
				t.Errorf("heartbeat %d of task other: %v", i, errs[i])
			}
			continue
		}
		if errs[i] != nil || results[i].Status != task.StatusSuccess || string(results[i].Result) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Errorf("result of t%d: %+v, %v", i, results[i], errs[i])
		}
	}
}

// TestClientCallerDeadline: a caller whose deadline passes gets its error then, while the
// invocation that carries its request is still out; the others get their answers when it
// returns. A call whose caller has gone before its batch goes is left out of it.
func TestClientCallerDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run := e.fixture(t, "run", task.StatusProcessing, eventLease)
	rec := &recorder{Invoker: statusfn.LocalInvoker{Handler: e.h}, hold: make(chan struct{})}
	c := statusfn.NewClientBatches(rec, never, 2)

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	shortErr := make(chan error, 1)
	go func() { shortErr <- c.Heartbeat(short, "echo", "run", run.Lease) }()
	longErr := make(chan error, 1)
	go func() { longErr <- c.Heartbeat(context.Background(), "echo", "run", run.Lease) }()
	// The batch is full with both: the short caller returns at its deadline, although the
	// invocation is held.
	if err := <-shortErr; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the short caller got %v, want its deadline", err)
	}
	if got := rec.invocations(); got != 1 {
		t.Fatalf("%d invocations out", got)
	}
	close(rec.hold)
	if err := <-longErr; err != nil {
		t.Fatalf("the other caller: %v", err)
	}

	// A caller gone before its batch is full: the batch goes without it.
	rec = &recorder{Invoker: statusfn.LocalInvoker{Handler: e.h}}
	c = statusfn.NewClientBatches(rec, never, 3)
	gone, cancelGone := context.WithCancel(context.Background())
	goneErr := make(chan error, 1)
	go func() { goneErr <- c.Heartbeat(gone, "echo", "run", run.Lease) }()
	cancelGone()
	if err := <-goneErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled caller got %v", err)
	}
	together(2, func(int) {
		if err := c.Heartbeat(context.Background(), "echo", "run", run.Lease); err != nil {
			t.Errorf("heartbeat: %v", err)
		}
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var requests int
	for _, p := range rec.payloads {
		var b statusfn.Request
		if err := json.Unmarshal([]byte(p), &b); err != nil {
			t.Fatal(err)
		}
		requests += max(len(b.Requests), 1)
	}
	if requests != 2 {
		t.Errorf("the invocations carried %d requests, want the 2 whose callers waited: %q", requests, rec.payloads)
	}
}

// oldFunction is a status function that predates batches: it speaks version 1 only.
type oldFunction struct{ statusfn.Invoker }

func (o oldFunction) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var v struct{ V int }
	if err := json.Unmarshal(payload, &v); err != nil {
		return nil, err
	}
	if v.V != statusfn.Version {
		return []byte(fmt.Sprintf(`{"v":1,"error":{"code":"invalid","message":"version %d is not supported: this status function speaks version 1"}}`, v.V)), nil
	}
	return o.Invoker.Invoke(ctx, payload)
}

// TestClientOldFunction: a worker deployed before its function gets every answer: the batch
// refused for its version goes again call by call, and later calls go alone from the start.
func TestClientOldFunction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 6 {
		e.fixture(t, fmt.Sprint("t", i), task.StatusEnqueued, "")
	}
	rec := &recorder{Invoker: oldFunction{statusfn.LocalInvoker{Handler: e.h}}}
	c := statusfn.NewClientBatches(rec, never, 3)
	claim := func(from int) {
		together(3, func(i int) {
			if _, err := c.Claim(context.Background(), "echo", fmt.Sprint("t", from+i), "r", ""); err != nil {
				t.Errorf("claim of t%d: %v", from+i, err)
			}
		})
	}
	claim(0)
	if b, s := rec.batches(); b != 1 || s != 3 {
		t.Errorf("the first claims: %d batches, %d singles; want the refused batch and 3 singles", b, s)
	}
	claim(3) // with a linger of an hour, these return only if they go alone
	if b, s := rec.batches(); b != 1 || s != 6 {
		t.Errorf("the next claims: %d batches, %d singles in all; want 1 and 6", b, s)
	}
}

// TestClientResendAlone: claims whose answers together pass Lambda's 6 MB response limit are
// answered in part in the batch; the rest are claimed again alone and get the same claim.
func TestClientResendAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 30 // 30 payloads of 250 KB: 7.5 MB of answers
	payload := bigJSON(250 << 10)
	now := time.Now().UTC()
	for i := range n {
		tk, err := task.New(task.Spec{ID: fmt.Sprint("t", i), Payload: payload}, echo, now, cfg)
		if err == nil {
			tk, err = task.Enqueue(tk, now, cfg)
		}
		if err == nil {
			err = e.store.Create(context.Background(), tk)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{Invoker: statusfn.LocalInvoker{Handler: e.h}}
	c := statusfn.NewClientBatches(rec, never, n)
	claimed := make([]task.Task, n)
	errs := make([]error, n)
	together(n, func(i int) {
		claimed[i], errs[i] = c.Claim(context.Background(), "echo", fmt.Sprint("t", i), fmt.Sprint("receipt-", i), "")
	})
	for i := range n {
		stored := e.get(t, fmt.Sprint("t", i))
		if errs[i] != nil || claimed[i].Lease != stored.Lease || stored.Attempts != 1 || len(claimed[i].Payload) != len(payload) {
			t.Errorf("claim of t%d: %v; lease %q, stored %q after %d attempts", i, errs[i], claimed[i].Lease, stored.Lease, stored.Attempts)
		}
	}
	b, s := rec.batches()
	if b != 1 || s == 0 {
		t.Errorf("%d batches and %d single invocations; want one batch, and claims sent again alone", b, s)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, size := range rec.answers {
		if size > statusfn.MaxResponseBytes {
			t.Errorf("answer %d is %d bytes, over Lambda's limit", i, size)
		}
	}
}

// gathering is a status controller whose store gathers counts (task.CountGatherer): it records
// the requests served under the gathered context, and when the flush came.
type gathering struct {
	*status.Controller
	mu                   sync.Mutex
	gathered, afterFlush int
	flushes              int
}

type gatheredKey struct{}

func (g *gathering) GatherCounts(ctx context.Context) (context.Context, func()) {
	return context.WithValue(ctx, gatheredKey{}, true), func() {
		g.mu.Lock()
		g.flushes++
		g.mu.Unlock()
	}
}

func (g *gathering) Heartbeat(ctx context.Context, lambda, id, lease string) error {
	g.mu.Lock()
	if ctx.Value(gatheredKey{}) != nil {
		g.gathered++
	}
	if g.flushes > 0 {
		g.afterFlush++
	}
	g.mu.Unlock()
	return g.Controller.Heartbeat(ctx, lambda, id, lease)
}

// TestBatchGathersCounts: the requests of a batch are served under one gathering of the store's
// counts, flushed once after the last of them and before the answer; the batch logs one record
// at info, its summary, and none per request served.
func TestBatchGathersCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := &gathering{Controller: e.hsc}
	var logs strings.Builder
	h := statusfn.NewHandler(g, slog.New(slog.NewJSONHandler(&logs, nil)))
	var reqs []statusfn.Request
	for i := range 5 {
		id := fmt.Sprintf("run%d", i)
		e.fixture(t, id, task.StatusProcessing, eventLease)
		reqs = append(reqs, statusfn.Request{V: 1, Op: statusfn.OpHeartbeat, Lambda: "echo", TaskID: id, Lease: eventLease})
	}
	reqs = append(reqs, statusfn.Request{V: 1, Op: statusfn.OpHeartbeat, Lambda: "echo", TaskID: "missing", Lease: eventLease})
	resp, err := h.Handle(context.Background(), statusfn.Request{V: statusfn.BatchVersion, Requests: reqs})
	if err != nil || len(resp.Responses) != len(reqs) {
		t.Fatalf("answered %+v, %v", resp, err)
	}
	if g.gathered != len(reqs) || g.afterFlush != 0 || g.flushes != 1 {
		t.Errorf("%d of %d requests served gathered, %d after the flush, %d flushes; want all, none, 1", g.gathered, len(reqs), g.afterFlush, g.flushes)
	}
	var records []map[string]any
	dec := json.NewDecoder(strings.NewReader(logs.String()))
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		records = append(records, r)
	}
	// The refused heartbeat of the missing task, and the summary.
	if len(records) != 2 || records[1]["msg"] != "status batch done" || records[1]["requests"] != float64(6) || records[1]["ok"] != float64(5) || records[1]["refused"] != float64(1) {
		t.Errorf("the batch logged %s; want its refusal and one summary of 6 requests, 5 ok, 1 refused", logs.String())
	}
}
