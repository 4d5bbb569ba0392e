package sqsworker_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// The timing of every test: heartbeats every 20ms, and timeouts that exceed three of them.
var cfg = task.Config{
	HeartbeatInterval: 20 * time.Millisecond, HeartbeatTimeout: 200 * time.Millisecond,
	BackoffBase: time.Minute, BackoffMax: time.Minute,
}.WithDefaults()

// echo is the lambda of the sample events.
var echo = task.Lambda{Name: "echo", Timeout: time.Minute}.WithDefaults()

type env struct {
	store *sqlitestore.Store
	hsc   *status.Controller
}

func newEnv(t *testing.T) env {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return env{store: store, hsc: status.New(store, status.Config{Task: cfg})}
}

// put stores task id of echo as the consumer would leave it: enqueued after attempts earlier
// retriable failures, or, if done, finished with a success.
func (e env) put(t *testing.T, id, payload string, attempts int, done bool) {
	t.Helper()
	now := time.Now().UTC().Add(-time.Hour)
	tk, err := task.New(task.Spec{ID: id, Payload: json.RawMessage(payload)}, echo, now, cfg)
	must(t, err)
	step := func(next task.Task, err error) {
		t.Helper()
		must(t, err)
		tk = next
	}
	step(task.Enqueue(tk, now, cfg))
	for range attempts {
		step(task.Claim(tk, "old", now, cfg))
		step(task.Fail(tk, "old", "earlier failure", true, now, cfg, 0))
		now = now.Add(2 * cfg.BackoffMax)
		step(task.Enqueue(tk, now, cfg))
	}
	if done {
		step(task.Claim(tk, "old", now, cfg))
		step(task.Succeed(tk, "old", json.RawMessage(`"earlier"`), now, cfg))
	}
	must(t, e.store.Create(context.Background(), tk))
}

func (e env) get(t *testing.T, id string) task.Task {
	t.Helper()
	tk, err := e.store.Get(context.Background(), echo.Name, id)
	must(t, err)
	return tk
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// recorder wraps the status controller: it counts calls and injects faults.
type recorder struct {
	executor.Status
	failClaim     string        // a task id whose claim fails with a non-domain error
	claimDelay    time.Duration // how long a claim takes before it is made
	failHeartbeat bool          // every heartbeat fails (the claim started the task)
	heartbeats    atomic.Int32
	results       atomic.Int32
	releases      atomic.Int32
}

func (r *recorder) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	if id == r.failClaim {
		return task.Task{}, errors.New("injected: status function unreachable")
	}
	time.Sleep(r.claimDelay)
	return r.Status.Claim(ctx, lambda, id, delivery, token)
}

func (r *recorder) Heartbeat(ctx context.Context, lambda, id, lease string) error {
	r.heartbeats.Add(1)
	if r.failHeartbeat {
		return errors.New("injected: status function unreachable")
	}
	return r.Status.Heartbeat(ctx, lambda, id, lease)
}

func (r *recorder) SetResult(ctx context.Context, lambda, id, lease string, res status.Result) (task.Task, error) {
	r.results.Add(1)
	return r.Status.SetResult(ctx, lambda, id, lease, res)
}

func (r *recorder) Release(ctx context.Context, lambda, id, lease string) error {
	r.releases.Add(1)
	return r.Status.Release(ctx, lambda, id, lease)
}

// payloadHandler does what the payload says: {"fail":"retriable"|"fatal"}, or echoes it.
// It counts runs per task.
type payloadHandler struct {
	mu   sync.Mutex
	runs map[string]int
}

func (p *payloadHandler) Handle(_ context.Context, t worker.Task) (json.RawMessage, error) {
	p.mu.Lock()
	if p.runs == nil {
		p.runs = map[string]int{}
	}
	p.runs[t.ID]++
	p.mu.Unlock()
	var in struct{ Fail string }
	_ = json.Unmarshal(t.Payload, &in)
	switch in.Fail {
	case "retriable":
		return nil, errors.New("downstream busy")
	case "fatal":
		return nil, worker.Fatal(errors.New("bad address"))
	}
	return t.Payload, nil
}

func (p *payloadHandler) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[id]
}

func newHandler(t *testing.T, c sqsworker.Config) *sqsworker.Handler {
	t.Helper()
	if c.Lambda.Name == "" {
		c.Lambda = echo
	}
	if c.Task.HeartbeatInterval == 0 {
		c.Task = cfg
	}
	h, err := sqsworker.New(c)
	must(t, err)
	return h
}

func readEvent(t *testing.T, path string) events.SQSEvent {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	var e events.SQSEvent
	must(t, json.Unmarshal(data, &e))
	return e
}

// ids returns the message ids of the records of e at positions i.
func ids(e events.SQSEvent, i ...int) []string {
	out := []string{}
	for _, n := range i {
		out = append(out, e.Records[n].MessageId)
	}
	return out
}

func failures(r events.SQSEventResponse) []string {
	out := []string{}
	for _, f := range r.BatchItemFailures {
		out = append(out, f.ItemIdentifier)
	}
	return out
}

type want struct {
	status   task.Status
	result   string // JSON; empty for none
	attempts int
	runs     int // handler calls in this batch
}

// outcome is what feeding one sample event must do.
type outcome struct {
	fixtures func(t *testing.T, e env)
	failed   []int // positions of the records reported in batchItemFailures
	tasks    map[string]want
}

// outcomes lists every file in events/sqs; a file without an entry fails the test.
var outcomes = map[string]outcome{
	"one.json": {
		fixtures: func(t *testing.T, e env) { e.put(t, "sqs-one-1", `{"hi":"there"}`, 0, false) },
		tasks:    map[string]want{"sqs-one-1": {task.StatusSuccess, `{"hi":"there"}`, 1, 1}},
	},
	"several.json": {
		fixtures: func(t *testing.T, e env) {
			e.put(t, "sqs-several-ok", `{"n":1}`, 0, false)
			e.put(t, "sqs-several-retry", `{"fail":"retriable"}`, 1, false)
			e.put(t, "sqs-several-fatal", `{"fail":"fatal"}`, 0, false)
		},
		// Every claimed record is acknowledged, whatever its handler did.
		tasks: map[string]want{
			"sqs-several-ok":    {task.StatusSuccess, `{"n":1}`, 1, 1},
			"sqs-several-retry": {task.StatusRetriableFailure, ``, 2, 1},
			"sqs-several-fatal": {task.StatusFatalFailure, ``, 1, 1},
		},
	},
	"duplicate.json": {
		// Two messages for one task: one claim wins, the other is a duplicate; both acknowledged.
		fixtures: func(t *testing.T, e env) { e.put(t, "sqs-dup-1", `"once"`, 0, false) },
		tasks:    map[string]want{"sqs-dup-1": {task.StatusSuccess, `"once"`, 1, 1}},
	},
	"finished.json": {
		// A finished task and a task that is not in the store: nothing runs, both acknowledged.
		fixtures: func(t *testing.T, e env) { e.put(t, "sqs-finished-1", `{}`, 0, true) },
		tasks:    map[string]want{"sqs-finished-1": {task.StatusSuccess, `"earlier"`, 1, 0}},
	},
	"poison.json": {
		// A body that is not JSON, one without a task id, one for another lambda: failed, for
		// the dead-letter queue. The good record of the batch runs.
		fixtures: func(t *testing.T, e env) { e.put(t, "sqs-poison-ok", `"fine"`, 0, false) },
		failed:   []int{0, 1, 2},
		tasks:    map[string]want{"sqs-poison-ok": {task.StatusSuccess, `"fine"`, 1, 1}},
	},
}

// TestEvents feeds every sample event to the handler, over the embedded store and an in-process
// status controller.
func TestEvents(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../../events/sqs/*.json")
	must(t, err)
	if len(files) == 0 {
		t.Fatal("no sample events in events/sqs")
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o, ok := outcomes[name]
			if !ok {
				t.Fatalf("events/sqs/%s has no expected outcome: add it to outcomes", name)
			}
			e := newEnv(t)
			o.fixtures(t, e)
			ev := readEvent(t, path)
			ph := &payloadHandler{}
			resp, err := newHandler(t, sqsworker.Config{Handler: ph, Status: e.hsc}).Handle(context.Background(), ev)
			must(t, err)
			if got, want := failures(resp), ids(ev, o.failed...); !slices.Equal(got, want) {
				t.Errorf("batchItemFailures %v, want %v", got, want)
			}
			for id, w := range o.tasks {
				got := e.get(t, id)
				if got.Status != w.status || string(got.Result) != w.result || got.Attempts != w.attempts || ph.count(id) != w.runs {
					t.Errorf("task %s: %s, result %s, %d attempts, ran %d times; want %s, %s, %d, %d (error %q)",
						id, got.Status, got.Result, got.Attempts, ph.count(id), w.status, w.result, w.attempts, w.runs, got.Error)
				}
			}
		})
	}
}

// TestEventShapes checks that the samples look like what Lambda delivers from SQS.
func TestEventShapes(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../../events/sqs/*.json")
	must(t, err)
	for _, path := range files {
		ev := readEvent(t, path)
		if len(ev.Records) == 0 {
			t.Errorf("%s: no records", path)
		}
		seen := map[string]bool{}
		for i, r := range ev.Records {
			sum := md5.Sum([]byte(r.Body))
			switch {
			case r.MessageId == "" || seen[r.MessageId]:
				t.Errorf("%s record %d: messageId %q is empty or repeated", path, i, r.MessageId)
			case r.ReceiptHandle == "" || r.EventSource != "aws:sqs" || r.AWSRegion == "":
				t.Errorf("%s record %d: receiptHandle, eventSource or awsRegion missing", path, i)
			case !strings.HasPrefix(r.EventSourceARN, "arn:aws:sqs:"+r.AWSRegion+":"):
				t.Errorf("%s record %d: eventSourceARN %q is not an SQS queue of %s", path, i, r.EventSourceARN, r.AWSRegion)
			case r.Md5OfBody != hex.EncodeToString(sum[:]):
				t.Errorf("%s record %d: md5OfBody does not match the body", path, i)
			case r.Attributes["ApproximateReceiveCount"] == "" || r.Attributes["SentTimestamp"] == "":
				t.Errorf("%s record %d: attributes lack ApproximateReceiveCount or SentTimestamp", path, i)
			case r.MessageAttributes == nil:
				t.Errorf("%s record %d: no messageAttributes", path, i)
			}
			seen[r.MessageId] = true
		}
	}
}

// TestClaimFailureComesBack: a claim that fails for a reason other than the task's state (the
// status function or the store is unreachable) is reported, and only that record.
func TestClaimFailureComesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	outcomes["several.json"].fixtures(t, e)
	ev := readEvent(t, "../../../events/sqs/several.json")
	rec := &recorder{Status: e.hsc, failClaim: "sqs-several-retry"}
	resp, err := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: rec}).Handle(context.Background(), ev)
	must(t, err)
	if got, want := failures(resp), ids(ev, 1); !slices.Equal(got, want) {
		t.Fatalf("batchItemFailures %v, want %v", got, want)
	}
	if got := e.get(t, "sqs-several-retry"); got.Status != task.StatusEnqueued || got.Attempts != 1 {
		t.Fatalf("unclaimed task is %s with %d attempts, want enqueued with 1", got.Status, got.Attempts)
	}
	for id, st := range map[string]task.Status{"sqs-several-ok": task.StatusSuccess, "sqs-several-fatal": task.StatusFatalFailure} {
		if got := e.get(t, id).Status; got != st {
			t.Errorf("%s is %s, want %s", id, got, st)
		}
	}
}

// TestLostHeartbeatsStopHandler: after three failed heartbeats the executor cancels the handler's
// context and writes no result. The message, which times the lease (the task names it), is not
// acknowledged: it comes back, and its claim times the attempt out once the lease is over.
func TestLostHeartbeatsStopHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "sqs-one-1", `{}`, 0, false)
	rec := &recorder{Status: e.hsc, failHeartbeat: true}
	var cause error
	stopped := make(chan struct{})
	h := newHandler(t, sqsworker.Config{Status: rec, Handler: worker.HandlerFunc(func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
		<-ctx.Done()
		cause = context.Cause(ctx)
		close(stopped)
		return json.RawMessage(`"late"`), nil // a result that must not be written
	})})
	resp, err := h.Handle(context.Background(), readEvent(t, "../../../events/sqs/one.json"))
	must(t, err)
	select {
	case <-stopped:
	default:
		t.Fatal("the handler was not stopped")
	}
	ev := readEvent(t, "../../../events/sqs/one.json")
	if got := failures(resp); !slices.Equal(got, []string{ev.Records[0].MessageId}) {
		t.Fatalf("batchItemFailures %v, want the record's message: it times the lease of a run whose end is not written", got)
	}
	if cause == nil || !strings.Contains(cause.Error(), "lease lost") {
		t.Fatalf("handler's context cause %v, want the lease-lost reason", cause)
	}
	if n := rec.results.Load(); n != 0 {
		t.Fatalf("SetResult called %d times, want never", n)
	}
	if n := rec.heartbeats.Load(); n != task.MaxMissedHeartbeats {
		t.Fatalf("%d heartbeats, want %d failed", n, task.MaxMissedHeartbeats)
	}
	if got := e.get(t, "sqs-one-1"); got.Status != task.StatusProcessing || got.Attempts != 1 || got.Result != nil || got.Message != ev.Records[0].MessageId {
		t.Fatalf("task is %s with %d attempts, result %s, timed by message %q; want processing, 1, none, %q", got.Status, got.Attempts, got.Result, got.Message, ev.Records[0].MessageId)
	}
}

// blocking runs until its context ends and records when and why.
type blocking struct {
	mu      sync.Mutex
	stopped map[string]time.Time
	causes  map[string]error
}

func (b *blocking) Handle(ctx context.Context, t worker.Task) (json.RawMessage, error) {
	<-ctx.Done()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped == nil {
		b.stopped, b.causes = map[string]time.Time{}, map[string]error{}
	}
	b.stopped[t.ID], b.causes[t.ID] = time.Now(), context.Cause(ctx)
	return nil, context.Cause(ctx)
}

// event returns a batch of one record per task id, on the echo lambda's normal queue.
func event(taskIDs ...string) events.SQSEvent {
	var e events.SQSEvent
	for _, id := range taskIDs {
		body, _ := json.Marshal(task.Message{Lambda: echo.Name, Priority: "normal", TaskID: id})
		e.Records = append(e.Records, events.SQSMessage{
			MessageId: "msg-" + id, ReceiptHandle: "rh-" + id, Body: string(body), EventSource: "aws:sqs",
			Attributes: map[string]string{"ApproximateReceiveCount": "1"},
		})
	}
	return e
}

// TestDeadlineReleasesLateRecord: the function leaves the lambda its full timeout, but the second
// record waits for the only slot and starts late. The margin stops its handler before the
// function's deadline and the task is released, its attempt not counted; the first record ran
// into its own timeout, a counted attempt.
func TestDeadlineReleasesLateRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "first", `{}`, 0, false)
	e.put(t, "late", `{}`, 0, false)
	l := echo
	// Seconds of budget, not fractions: a loaded machine (the suite runs packages side by side)
	// took the first record's result write past a margin of 400 ms.
	l.Concurrency, l.Timeout = 1, 2*time.Second
	margin := time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	bh := &blocking{}
	resp, err := newHandler(t, sqsworker.Config{Lambda: l, Handler: bh, Status: e.hsc, Margin: margin, Slack: 200 * time.Millisecond}).Handle(ctx, event("first", "late"))
	must(t, err)
	returned := time.Now()

	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batchItemFailures %v, want none", failures(resp))
	}
	if !returned.Before(deadline) {
		t.Fatalf("Handle returned %s after the deadline", returned.Sub(deadline))
	}
	bh.mu.Lock()
	defer bh.mu.Unlock()
	if s, ok := bh.stopped["late"]; !ok || !s.Before(deadline.Add(-margin/2)) {
		t.Fatalf("late handler stopped at %v, want before the deadline %v less the margin", s, deadline)
	}
	if c := bh.causes["late"]; c == nil || !strings.Contains(c.Error(), "about to time out") {
		t.Fatalf("late handler's cause %v, want the function's deadline", c)
	}
	if got := e.get(t, "late"); got.Status != task.StatusNew || got.Attempts != 0 {
		t.Fatalf("late task is %s with %d attempts, want released: new with 0", got.Status, got.Attempts)
	}
	if got := e.get(t, "first"); got.Status != task.StatusRetriableFailure || got.Attempts != 1 || !strings.Contains(got.Error, "timed out") {
		t.Fatalf("first task is %s with %d attempts (%q), want a timed-out retriable failure", got.Status, got.Attempts, got.Error)
	}
}

// TestDeadlineExactFunctionIsLongEnough: the stack sizes the function at exactly the lambda's
// timeout plus the margin, and Lambda's clock starts before Handle runs. Such an invocation is
// not "too short": it logs no warning, and a record that started late (it waited for the only
// slot) and is cut by the margin is released, its attempt not counted.
func TestDeadlineExactFunctionIsLongEnough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "quick", `{}`, 0, false)
	e.put(t, "late", `{}`, 0, false)
	l := echo
	l.Concurrency, l.Timeout = 1, time.Second
	margin := 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), l.Timeout+margin)
	defer cancel()
	bh := &blocking{}
	h := worker.HandlerFunc(func(ctx context.Context, tk worker.Task) (json.RawMessage, error) {
		if tk.ID == "quick" { // holds the only slot for most of the lambda's timeout
			time.Sleep(l.Timeout * 6 / 10)
			return nil, nil
		}
		return bh.Handle(ctx, tk)
	})
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	resp, err := newHandler(t, sqsworker.Config{Lambda: l, Handler: h, Status: e.hsc, Margin: margin, Slack: 200 * time.Millisecond, Logger: logger}).Handle(ctx, event("quick", "late"))
	must(t, err)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batchItemFailures %v, want none", failures(resp))
	}
	if strings.Contains(logs.String(), "shorter than") {
		t.Errorf("an exactly sized function was treated as too short:\n%s", logs.String())
	}
	bh.mu.Lock()
	defer bh.mu.Unlock()
	if c := bh.causes["late"]; c == nil || !strings.Contains(c.Error(), "about to time out") {
		t.Fatalf("late handler's cause %v, want the function's deadline", c)
	}
	if got := e.get(t, "late"); got.Status != task.StatusNew || got.Attempts != 0 {
		t.Fatalf("late task is %s with %d attempts (%q), want released: new with 0", got.Status, got.Attempts, got.Error)
	}
	if got := e.get(t, "quick"); got.Status != task.StatusSuccess {
		t.Fatalf("quick task is %s", got.Status)
	}
}

// TestDeadlineExactFunctionCountsTimeout: in a function sized at exactly the lambda's timeout
// plus the margin, a handler that runs into its timeout from the start of the invocation had its
// full time (less Slack): that is a counted, timed-out attempt, not a release, so a task that
// never finishes ends dead rather than running forever.
func TestDeadlineExactFunctionCountsTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "hangs", `{}`, 0, false)
	l := echo
	l.Timeout = 500 * time.Millisecond
	margin := 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), l.Timeout+margin)
	defer cancel()
	bh := &blocking{}
	resp, err := newHandler(t, sqsworker.Config{Lambda: l, Handler: bh, Status: e.hsc, Margin: margin, Slack: 200 * time.Millisecond}).Handle(ctx, event("hangs"))
	must(t, err)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batchItemFailures %v, want none", failures(resp))
	}
	if got := e.get(t, "hangs"); got.Status != task.StatusRetriableFailure || got.Attempts != 1 || !strings.Contains(got.Error, "timed out") {
		t.Fatalf("task is %s with %d attempts (%q), want a timed-out retriable failure", got.Status, got.Attempts, got.Error)
	}
}

// syncBuffer is a bytes.Buffer for a logger that handlers write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDeadlineShortFunctionCounts: a function whose whole time is shorter than the lambda's
// timeout cuts the handler to the time it has; running out of it is a counted attempt, so a task
// that never fits is not released forever.
func TestDeadlineShortFunctionCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "long", `{}`, 0, false)
	margin := 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	bh := &blocking{}
	resp, err := newHandler(t, sqsworker.Config{Handler: bh, Status: e.hsc, Margin: margin}).Handle(ctx, event("long"))
	must(t, err)
	if !time.Now().Before(deadline) {
		t.Fatal("Handle returned after the deadline")
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batchItemFailures %v, want none", failures(resp))
	}
	bh.mu.Lock()
	defer bh.mu.Unlock()
	if s := bh.stopped["long"]; s.IsZero() || s.After(deadline.Add(-margin/2)) {
		t.Fatalf("handler stopped at %v, want by the deadline %v less the margin", s, deadline)
	}
	if got := e.get(t, "long"); got.Status != task.StatusRetriableFailure || got.Attempts != 1 || !strings.Contains(got.Error, "timed out") {
		t.Fatalf("task is %s with %d attempts (%q), want a timed-out retriable failure", got.Status, got.Attempts, got.Error)
	}
}

// TestShortFunctionWarnsOnce: a function configured shorter than its lambda's timeout plus the
// margin says so once per instance (a Handler), not on every invocation; an exactly sized one
// never says so (TestDeadlineExactFunctionIsLongEnough).
func TestShortFunctionWarnsOnce(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	l := echo
	l.Timeout = time.Minute
	h := newHandler(t, sqsworker.Config{Lambda: l, Handler: &payloadHandler{}, Status: newEnv(t).hsc, Margin: time.Second, Logger: logger})
	for range 3 {
		// Half the lambda's timeout plus the margin: short by far more than Slack.
		ctx, cancel := context.WithTimeout(context.Background(), l.Timeout/2+time.Second)
		_, err := h.Handle(ctx, events.SQSEvent{})
		cancel()
		must(t, err)
	}
	if n := strings.Count(logs.String(), "shorter than the lambda's timeout"); n != 1 {
		t.Fatalf("%d warnings of a short function over 3 invocations, want 1:\n%s", n, logs.String())
	}
}

// TestDeadlineNoTimeLeft: a record whose turn comes with less than the margin left is not
// claimed; it is reported so SQS delivers it again.
func TestDeadlineNoTimeLeft(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "a", `{}`, 0, false)
	e.put(t, "b", `{}`, 0, false)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ph := &payloadHandler{}
	ev := event("a", "b")
	resp, err := newHandler(t, sqsworker.Config{Handler: ph, Status: e.hsc, Margin: time.Second}).Handle(ctx, ev)
	must(t, err)
	if got, want := failures(resp), ids(ev, 0, 1); !slices.Equal(got, want) {
		t.Fatalf("batchItemFailures %v, want %v", got, want)
	}
	for _, id := range []string{"a", "b"} {
		if got := e.get(t, id); got.Status != task.StatusEnqueued || got.Attempts != 0 || ph.count(id) != 0 {
			t.Fatalf("task %s is %s with %d attempts, ran %d times; want enqueued, untouched", id, got.Status, got.Attempts, ph.count(id))
		}
	}
}

// TestDeadlineClaimedTooLate: a claim that returns after the margin has begun is handed back at
// once, untried, and its message acknowledged: the consumer enqueues the task again. (The
// margin begins at 200 ms; the claim may take until about 370 ms, half the time to a third of
// the margin before the deadline, the other half being its unclaim's.)
func TestDeadlineClaimedTooLate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "slow-claim", `{}`, 0, false)
	// 200 ms to claim before the margin, a claim of 280 ms and more: the claim ends past the
	// margin, with seconds to spare for it and the release on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec := &recorder{Status: e.hsc, claimDelay: 280 * time.Millisecond}
	ph := &payloadHandler{}
	long := cfg // a claim may take longer than the invocation has left, not than its lease
	long.HeartbeatTimeout = 5 * time.Second
	resp, err := newHandler(t, sqsworker.Config{Handler: ph, Status: rec, Task: long, Margin: 4800 * time.Millisecond}).Handle(ctx, event("slow-claim"))
	must(t, err)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batchItemFailures %v, want none: the claim settled", failures(resp))
	}
	if got := e.get(t, "slow-claim"); got.Status != task.StatusNew || got.Attempts != 0 || ph.count("slow-claim") != 0 || rec.releases.Load() != 1 {
		t.Fatalf("task is %s with %d attempts, ran %d times, %d releases; want released untried", got.Status, got.Attempts, ph.count("slow-claim"), rec.releases.Load())
	}
}

// TestConcurrency: records run at once up to the lambda's Concurrency, no more.
func TestConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var taskIDs []string
	for _, id := range []string{"c1", "c2", "c3", "c4", "c5"} {
		e.put(t, id, `{}`, 0, false)
		taskIDs = append(taskIDs, id)
	}
	l := echo
	l.Concurrency = 2
	var running, most atomic.Int32
	full := make(chan struct{}) // closed when two handlers first run together
	var once sync.Once
	h := newHandler(t, sqsworker.Config{Lambda: l, Status: e.hsc, Handler: worker.HandlerFunc(func(context.Context, worker.Task) (json.RawMessage, error) {
		defer running.Add(-1)
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n >= 2 {
			once.Do(func() { close(full) })
		}
		select { // hold the slot until both are taken, so a third would show
		case <-full:
			time.Sleep(10 * time.Millisecond)
		case <-time.After(5 * time.Second):
		}
		return nil, nil
	})})
	resp, err := h.Handle(context.Background(), event(taskIDs...))
	must(t, err)
	if len(resp.BatchItemFailures) != 0 || most.Load() != 2 {
		t.Fatalf("failures %v, at most %d at once; want none and 2", failures(resp), most.Load())
	}
	for _, id := range taskIDs {
		if got := e.get(t, id).Status; got != task.StatusSuccess {
			t.Fatalf("%s is %s", id, got)
		}
	}
}

// TestResponseJSON: the response Lambda reads, with the field names it expects.
func TestResponseJSON(t *testing.T) {
	t.Parallel()
	ev := readEvent(t, "../../../events/sqs/poison.json")
	e := newEnv(t)
	resp, err := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: e.hsc}).Handle(context.Background(), ev)
	must(t, err)
	data, err := json.Marshal(resp)
	must(t, err)
	want := `{"batchItemFailures":[{"itemIdentifier":"` + ev.Records[0].MessageId + `"},{"itemIdentifier":"` +
		ev.Records[1].MessageId + `"},{"itemIdentifier":"` + ev.Records[2].MessageId + `"}]}`
	if string(data) != want {
		t.Fatalf("response %s\nwant     %s", data, want)
	}
	empty, _ := json.Marshal(events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}})
	resp, err = newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: e.hsc}).Handle(context.Background(), events.SQSEvent{})
	must(t, err)
	if data, _ := json.Marshal(resp); string(data) != string(empty) {
		t.Fatalf("empty batch: %s, want %s", data, empty)
	}
}

func TestNewNamesTheWrongField(t *testing.T) {
	t.Parallel()
	h := &payloadHandler{}
	s := newEnv(t).hsc
	for _, tc := range []struct {
		c    sqsworker.Config
		want string
	}{
		{sqsworker.Config{Lambda: task.Lambda{Name: "Bad Name"}, Handler: h, Status: s}, "Lambda"},
		{sqsworker.Config{Lambda: echo, Status: s}, "Handler"},
		{sqsworker.Config{Lambda: echo, Handler: h}, "Status"},
		{sqsworker.Config{Lambda: echo, Handler: h, Status: s, Margin: -time.Second}, "Margin"},
		{sqsworker.Config{Lambda: echo, Handler: h, Status: s, Slack: -time.Second}, "Slack"},
		{sqsworker.Config{Lambda: echo, Handler: h, Status: s, Task: task.Config{HeartbeatInterval: -time.Second}}, "HeartbeatInterval"},
		{sqsworker.Config{Lambda: echo, Handler: h, Status: s, Task: task.Config{HeartbeatTimeout: 10 * time.Second, LeaseMargin: 8 * time.Second}}, "LeaseMargin"},
	} {
		if _, err := sqsworker.New(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error naming %s", err, tc.want)
		}
	}
}

// visibilities records the calls that shorten a message's visibility.
type visibilities struct {
	mu    sync.Mutex
	calls map[string]time.Duration // by receipt
	tasks []task.Message
}

func (v *visibilities) Extend(_ context.Context, d task.Delivery, visibility time.Duration) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.calls == nil {
		v.calls = map[string]time.Duration{}
	}
	v.calls[d.Receipt] = visibility
	v.tasks = append(v.tasks, d.Message)
	return nil
}

// TestTransientFailureComesBackSoon: a record whose claim failed, or that came with too little
// time left to claim, is hidden for RetryDelay only; a poison record keeps the queue's timeout.
func TestTransientFailureComesBackSoon(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "fails", `{}`, 0, false)
	e.put(t, "ok", `{}`, 0, false)
	ev := event("fails", "ok")
	ev.Records[0].Attributes["ApproximateReceiveCount"] = "3"
	ev.Records = append(ev.Records, events.SQSMessage{MessageId: "msg-poison", ReceiptHandle: "rh-poison", Body: "not json",
		Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
	vis := &visibilities{}
	rec := &recorder{Status: e.hsc, failClaim: "fails"}
	resp, err := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: rec, Queue: vis}).Handle(context.Background(), ev)
	must(t, err)
	if got, want := failures(resp), ids(ev, 0, 2); !slices.Equal(got, want) {
		t.Fatalf("batchItemFailures %v, want %v", got, want)
	}
	if want := map[string]time.Duration{"rh-fails": 4 * sqsworker.RetryDelayBase}; !maps.Equal(vis.calls, want) {
		t.Fatalf("visibility changed %v, want %v", vis.calls, want)
	}
	if m := vis.tasks[0]; m.Lambda != echo.Name || m.Priority != "normal" || m.TaskID != "fails" {
		t.Fatalf("visibility changed on %+v", m)
	}

	// No time left to claim: both records are hidden for RetryDelay.
	vis = &visibilities{}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ev = event("a", "b")
	resp, err = newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: e.hsc, Margin: time.Second, Queue: vis}).Handle(ctx, ev)
	must(t, err)
	if want := map[string]time.Duration{"rh-a": sqsworker.RetryDelayBase, "rh-b": sqsworker.RetryDelayBase}; len(resp.BatchItemFailures) != 2 || !maps.Equal(vis.calls, want) {
		t.Fatalf("failures %v, visibility changed %v; want both, %v", failures(resp), vis.calls, want)
	}
}

func TestRetryDelay(t *testing.T) {
	for n, want := range map[int]time.Duration{0: 2 * time.Second, 1: 2 * time.Second, 2: 4 * time.Second, 5: 32 * time.Second, 6: time.Minute, 100: time.Minute} {
		if got := sqsworker.RetryDelay(n); got != want {
			t.Errorf("RetryDelay(%d) = %s, want %s", n, got, want)
		}
	}
}

// TestLogHandlerOutput: a worker function logs each line its handler writes to the attempt's
// log, naming the task, since on AWS no store keeps attempt logs; without the setting it does not.
func TestLogHandlerOutput(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		e := newEnv(t)
		e.put(t, "talks", `{}`, 0, false)
		var logs syncBuffer
		h := newHandler(t, sqsworker.Config{Status: e.hsc, LogHandlerOutput: on, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Handler: worker.HandlerFunc(func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
				fmt.Fprintln(worker.LogOf(ctx), "reticulating splines")
				return nil, nil
			})})
		resp, err := h.Handle(context.Background(), event("talks"))
		must(t, err)
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batchItemFailures %v, want none", failures(resp))
		}
		logged := strings.Contains(logs.String(), `line="reticulating splines"`) && strings.Contains(logs.String(), "task_id=talks")
		if logged != on {
			t.Fatalf("LogHandlerOutput %v: the handler's line logged with its task: %v, want %v\n%s", on, logged, on, logs.String())
		}
	}
}

// TestBatchLogsSummary: a batch logs one record at info, its summary, beside one per run that
// failed; a run that succeeded is logged at debug only (CloudWatch Logs bills each record).
func TestBatchLogsSummary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "ok1", `{}`, 0, false)
	e.put(t, "ok2", `{}`, 0, false)
	e.put(t, "busy", `{"Fail":"retriable"}`, 0, false)
	var logs syncBuffer
	h := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: e.hsc, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	resp, err := h.Handle(context.Background(), event("ok1", "ok2", "busy"))
	must(t, err)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batchItemFailures %v, want none", failures(resp))
	}
	var msgs []string
	for line := range strings.Lines(logs.String()) {
		var r struct {
			Msg     string `json:"msg"`
			TaskID  string `json:"task_id"`
			Records int    `json:"records"`
		}
		must(t, json.Unmarshal([]byte(line), &r))
		msgs = append(msgs, fmt.Sprintf("%s %s%d", r.Msg, r.TaskID, r.Records))
	}
	if want := []string{"task ran busy0", "batch done 3"}; !slices.Equal(msgs, want) {
		t.Errorf("the batch logged %q, want %q:\n%s", msgs, want, logs.String())
	}
}

// TestEarlyClaimComesBack: a claim refused as early (the worker's clock ahead of the status
// controller's by more than task.ClaimEarly) is no duplicate: the record fails and is hidden
// until its task is due, so that the message, perhaps its task's only one (docs/guarantees.md,
// "Send, then write"), comes back then, and the task stays enqueued.
func TestEarlyClaimComesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now().UTC()
	in := 10 * time.Minute
	tk, err := task.New(task.Spec{ID: "early", Delay: &in}, echo, now, cfg)
	must(t, err)
	tk, _, err = task.EnqueueAhead(tk, now, cfg)
	must(t, err)
	must(t, e.store.Create(context.Background(), tk))
	ev := event("early") // as its worker reads it: the run time passed already
	vis := &visibilities{}
	resp, err := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: e.hsc, Queue: vis}).Handle(context.Background(), ev)
	must(t, err)
	hidden, most := vis.calls["rh-early"], in
	if got := e.get(t, "early"); !slices.Equal(failures(resp), ids(ev, 0)) || hidden > most || hidden < most-time.Minute || got.Status != task.StatusEnqueued {
		t.Fatalf("failures %v, visibility %v, task %s; want the record failed, hidden until its task is due (%s from its send), the task enqueued", failures(resp), vis.calls, got.Status, most)
	}
}

// TestLeaseMessageBackAtLeaseEnd: the message that times a running task's lease, back before the
// lease ends (its claim was written, but the answer was lost), is refused as early and hidden
// until the lease ends, when its claim times the attempt out, not retried every RetryDelay.
func TestLeaseMessageBackAtLeaseEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long := cfg
	long.HeartbeatTimeout = 10 * time.Minute // a lease well past RetryDelayMax
	e.hsc = status.New(e.store, status.Config{Task: long})
	e.put(t, "lost", `{}`, 0, false)
	ev := event("lost")
	// The first claim of the message, whose answer its worker never saw.
	ctx := status.WithMessage(context.Background(), ev.Records[0].MessageId)
	claimed, err := e.hsc.Claim(ctx, echo.Name, "lost", "rh-first", "token")
	must(t, err)
	most := time.Until(*claimed.NextTriggerAt) // the lease's end, from before the worker's claim
	vis := &visibilities{}
	resp, err := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: e.hsc, Queue: vis}).Handle(context.Background(), ev)
	must(t, err)
	hidden := vis.calls["rh-lost"]
	if got := e.get(t, "lost"); !slices.Equal(failures(resp), ids(ev, 0)) || hidden > most || hidden < most-time.Minute || got.Status != task.StatusProcessing || got.Attempts != 1 {
		t.Fatalf("failures %v, hidden %s, task %s after %d attempts; want the record failed, hidden until the lease ends (%s), the task running its first attempt", failures(resp), hidden, got.Status, got.Attempts, most)
	}
}
