package statusfn_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
)

// eventLease is the lease every sample event in events/status carries.
const eventLease = "Q7B2XKZ4MNW5RJ3TVCYH6DLPEA"

var (
	echo = task.Lambda{Name: "echo"}.WithDefaults()
	cfg  = task.Config{}.WithDefaults()
)

type env struct {
	store *sqlitestore.Store
	hsc   *status.Controller
	log   *bytes.Buffer // what the Handler logged
	h     *statusfn.Handler
}

func newEnv(t *testing.T) env {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var log bytes.Buffer
	hsc := status.New(store, status.Config{Task: cfg})
	h := statusfn.NewHandler(hsc, slog.New(slog.NewJSONHandler(&log, nil)))
	return env{store: store, hsc: hsc, log: &log, h: h}
}

// fixture stores task id of the echo lambda in status s (new, enqueued, claimed or processing),
// moved there by the domain's own transitions; a claim takes lease.
func (e env) fixture(t *testing.T, id string, s task.Status, lease string) task.Task {
	t.Helper()
	now := time.Now().UTC()
	tk, err := task.New(task.Spec{ID: id, Payload: json.RawMessage(`{"to":"someone"}`)}, echo, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func(task.Task) (task.Task, error){
		func(tk task.Task) (task.Task, error) { return task.Enqueue(tk, now, cfg) },
		func(tk task.Task) (task.Task, error) { return task.Claim(tk, lease, now, cfg) },
	}
	for _, step := range steps {
		if tk.Status == s || s == task.StatusClaimed && tk.Status == task.StatusProcessing {
			break
		}
		if tk, err = step(tk); err != nil {
			t.Fatal(err)
		}
	}
	if s == task.StatusClaimed && tk.Status == task.StatusProcessing && tk.Attempts == 1 {
		tk.Status = s // as claimed by an older version, not yet started
	}
	if tk.Status != s {
		t.Fatalf("fixture cannot reach status %s", s)
	}
	if err := e.store.Create(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	return tk
}

func (e env) get(t *testing.T, id string) task.Task {
	t.Helper()
	tk, err := e.store.Get(context.Background(), echo.Name, id)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// eventCase is what one file of events/status must do.
type eventCase struct {
	fixture task.Status // the task's status before; none if empty
	lease   string      // the fixture's lease; eventLease if empty
	code    string      // the response's error code; empty for success
	failed  bool        // the invocation fails, as it does on AWS (a function error)
	after   task.Status // the task's status after; the fixture's if empty
	check   func(t *testing.T, req statusfn.Request, resp statusfn.Response, stored task.Task)
}

var eventCases = map[string]eventCase{
	"claim.json": {fixture: task.StatusEnqueued, after: task.StatusProcessing,
		check: func(t *testing.T, _ statusfn.Request, resp statusfn.Response, stored task.Task) {
			if resp.Lease == "" || resp.Lease != stored.Lease {
				t.Errorf("lease %q, stored %q", resp.Lease, stored.Lease)
			}
			if resp.Task == nil || resp.Task.Status != task.StatusProcessing || resp.Task.Attempts != 1 || resp.Task.Version != stored.Version {
				t.Errorf("task %+v, stored %+v", resp.Task, stored)
			}
			if string(resp.Task.Payload) != `{"to":"someone"}` {
				t.Errorf("payload %s", resp.Task.Payload)
			}
		}},
	"claim-not-enqueued.json": {fixture: task.StatusNew, code: "conflict"},
	"claim-not-found.json":    {code: "not_found"},
	// A task claimed by an older version, which started it with a first heartbeat.
	"heartbeat.json": {fixture: task.StatusClaimed, after: task.StatusProcessing,
		check: func(t *testing.T, _ statusfn.Request, resp statusfn.Response, _ task.Task) {
			if resp.Task != nil || resp.Lease != "" {
				t.Errorf("a heartbeat answers nothing but success, got %+v", resp)
			}
		}},
	"heartbeat-stale-lease.json":   {fixture: task.StatusProcessing, lease: "SOMEONEELSESLEASE234567ABC", code: "stale_lease"},
	"heartbeat-without-lease.json": {fixture: task.StatusProcessing, code: "invalid"},
	"set-result-success.json": {fixture: task.StatusProcessing, after: task.StatusSuccess,
		check: func(t *testing.T, _ statusfn.Request, resp statusfn.Response, stored task.Task) {
			var result bytes.Buffer
			json.Compact(&result, stored.Result)
			if result.String() != `{"hi":"there"}` || stored.NextTriggerAt != nil {
				t.Errorf("stored result %s, next trigger %v", stored.Result, stored.NextTriggerAt)
			}
			if resp.Task == nil || resp.Task.Status != task.StatusSuccess || resp.Lease != "" {
				t.Errorf("response %+v", resp)
			}
		}},
	"set-result-retriable.json": {fixture: task.StatusProcessing, after: task.StatusRetriableFailure,
		check: func(t *testing.T, req statusfn.Request, _ statusfn.Response, stored task.Task) {
			if stored.Error != req.Error || stored.NextTriggerAt == nil || stored.Lease != "" {
				t.Errorf("stored %+v", stored)
			}
		}},
	"set-result-fatal.json": {fixture: task.StatusProcessing, after: task.StatusFatalFailure,
		check: func(t *testing.T, req statusfn.Request, _ statusfn.Response, stored task.Task) {
			if stored.Error != req.Error || stored.NextTriggerAt != nil {
				t.Errorf("stored %+v", stored)
			}
		}},
	"set-result-bad-outcome.json": {fixture: task.StatusProcessing, code: "invalid"},
	// A snooze: no attempt counted, due again after its delay.
	"set-result-snoozed.json": {fixture: task.StatusProcessing, after: task.StatusNew,
		check: func(t *testing.T, _ statusfn.Request, _ statusfn.Response, stored task.Task) {
			if stored.Attempts != 0 || stored.Lease != "" || stored.NextTriggerAt == nil || !stored.NextTriggerAt.Equal(stored.UpdatedAt.Add(5*time.Minute)) {
				t.Errorf("a snooze counts no attempt and is due after its delay: %+v", stored)
			}
		}},
	// A retry after the handler's delay, not the backoff: the attempt counts.
	"set-result-retry-after.json": {fixture: task.StatusProcessing, after: task.StatusRetriableFailure,
		check: func(t *testing.T, req statusfn.Request, _ statusfn.Response, stored task.Task) {
			if stored.Error != req.Error || stored.Attempts != 1 || stored.NextTriggerAt == nil || !stored.NextTriggerAt.Equal(stored.UpdatedAt.Add(2*time.Hour)) {
				t.Errorf("stored %+v; want the attempt counted, due 2h after it ended", stored)
			}
		}},
	"set-result-bad-delay.json": {fixture: task.StatusProcessing, code: "invalid"},
	"release.json": {fixture: task.StatusProcessing, after: task.StatusNew,
		check: func(t *testing.T, _ statusfn.Request, _ statusfn.Response, stored task.Task) {
			if stored.Attempts != 0 || stored.Lease != "" {
				t.Errorf("a release does not count the attempt nor keep the lease: %+v", stored)
			}
		}},
	"unknown-op.json":          {fixture: task.StatusProcessing, code: "invalid"},
	"unsupported-version.json": {fixture: task.StatusProcessing, code: "invalid"},
	"missing-version.json":     {fixture: task.StatusEnqueued, code: "invalid"},
	"malformed-fields.json":    {code: "invalid"},
	"wrong-type.json":          {fixture: task.StatusEnqueued, failed: true},
}

// TestEvents feeds every sample event to the Handler, through the JSON the function sees, and
// checks the answer and the store after it.
func TestEvents(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../../events/status/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample events: %v", err)
	}
	seen := map[string]bool{}
	e := newEnv(t)
	inv := statusfn.LocalInvoker{Handler: e.h}
	for _, file := range files {
		name := filepath.Base(file)
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			c, ok := eventCases[name]
			if !ok {
				t.Fatalf("events/status/%s has no expected outcome in eventCases", name)
			}
			payload, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var req statusfn.Request
			json.Unmarshal(payload, &req) // best effort: wrong-type.json does not decode
			var before task.Task
			if c.fixture != "" {
				before = e.fixture(t, req.TaskID, c.fixture, cmp.Or(c.lease, eventLease))
			}

			ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-" + name})
			out, err := inv.Invoke(ctx, payload)
			if c.failed {
				if err == nil {
					t.Fatalf("invocation succeeded: %s", out)
				}
				if got := e.get(t, req.TaskID); got.Version != before.Version {
					t.Errorf("a failed invocation changed the task: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var resp statusfn.Response
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&resp); err != nil {
				t.Fatalf("response %s: %v", out, err)
			}
			if resp.V != statusfn.Version {
				t.Errorf("response version %d", resp.V)
			}
			switch {
			case c.code == "" && resp.Error != nil:
				t.Fatalf("error %+v", resp.Error)
			case c.code != "" && (resp.Error == nil || resp.Error.Code != c.code):
				t.Fatalf("response %s, want code %s", out, c.code)
			case c.code != "" && (resp.Error.Message == "" || resp.Task != nil || resp.Lease != ""):
				t.Errorf("a refusal carries a message and nothing else: %s", out)
			}
			if c.fixture == "" {
				return
			}
			stored := e.get(t, req.TaskID)
			if want := cmp.Or(c.after, c.fixture); stored.Status != want {
				t.Errorf("stored status %s, want %s", stored.Status, want)
			}
			if c.code != "" && stored.Version != before.Version {
				t.Errorf("a refused request changed the task: version %d, was %d", stored.Version, before.Version)
			}
			if c.check != nil {
				c.check(t, req, resp, stored)
			}
		})
	}
	for name := range eventCases {
		if !seen[name] {
			t.Errorf("eventCases lists %s, which is not in events/status", name)
		}
	}

	// The log names ops and tasks, never payloads, results, handler errors or leases; a claim,
	// a heartbeat and a success served are not logged at info, a refusal or a failed run's
	// result is.
	logs := e.log.String()
	for _, secret := range []string{eventLease, "someone", "there", "upstream answered 503", "no recipient"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log shows %q:\n%s", secret, logs)
		}
	}
	for _, want := range []string{`"op":"set_result"`, `"task_id":"status-stale-1"`, `"code":"stale_lease"`, `"outcome":"fatal"`, `"request_id":"req-claim-not-found.json"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s:\n%s", want, logs)
		}
	}
	for _, quiet := range []string{`"request_id":"req-claim.json"`, `"request_id":"req-heartbeat.json"`, `"request_id":"req-set-result-success.json"`} {
		if strings.Contains(logs, quiet) {
			t.Errorf("the log shows %s at info:\n%s", quiet, logs)
		}
	}
}

// TestClaimResponseJSON: the lease of a claim travels beside the task, whose JSON hides it.
func TestClaimResponseJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fixture(t, "t1", task.StatusEnqueued, "")
	out, err := statusfn.LocalInvoker{Handler: e.h}.Invoke(context.Background(), []byte(`{"v":1,"op":"claim","lambda":"echo","task_id":"t1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		V     int                        `json:"v"`
		Lease string                     `json:"lease"`
		Task  map[string]json.RawMessage `json:"task"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatal(err)
	}
	if raw.V != 1 || raw.Lease != e.get(t, "t1").Lease || raw.Task["id"] == nil || raw.Task["lease"] != nil {
		t.Errorf("claim response %s", out)
	}
}

func newClient(e env) *statusfn.Client {
	return statusfn.NewClient(statusfn.LocalInvoker{Handler: e.h})
}

// TestClient runs one task through the Client end to end: claim, heartbeat, result.
func TestClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := newClient(e)
	ctx := context.Background()
	e.fixture(t, "t1", task.StatusEnqueued, "")

	claimed, err := c.Claim(ctx, "echo", "t1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	stored := e.get(t, "t1")
	if claimed.Lease == "" || claimed.Lease != stored.Lease || claimed.Status != task.StatusProcessing ||
		claimed.Version != stored.Version || claimed.Attempts != 1 || string(claimed.Payload) != string(stored.Payload) ||
		!claimed.NextTriggerAt.Equal(*stored.NextTriggerAt) {
		t.Fatalf("claimed %+v\nstored %+v", claimed, stored)
	}
	if err := c.Heartbeat(ctx, "echo", "t1", claimed.Lease); err != nil {
		t.Fatal(err)
	}
	if got := e.get(t, "t1"); got.Status != task.StatusProcessing || got.Version != claimed.Version+1 {
		t.Fatalf("after a heartbeat the task is %s at version %d", got.Status, got.Version)
	}
	if err := c.Heartbeat(ctx, "echo", "t1", "NOTTHELEASE"); !errors.Is(err, task.ErrStaleLease) {
		t.Fatalf("heartbeat with another lease: %v", err)
	}
	done, err := c.SetResult(ctx, "echo", "t1", claimed.Lease, status.Result{Outcome: status.Success, Result: json.RawMessage(`{"ok":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != task.StatusSuccess || string(done.Result) != `{"ok":true}` || done.Lease != "" {
		t.Fatalf("result %+v", done)
	}
	// The lease died with the run.
	if err := c.Heartbeat(ctx, "echo", "t1", claimed.Lease); !errors.Is(err, task.ErrStaleLease) {
		t.Errorf("heartbeat after the result: %v", err)
	}
	if err := c.Release(ctx, "echo", "t1", claimed.Lease); !errors.Is(err, task.ErrStaleLease) {
		t.Errorf("release after the result: %v", err)
	}
	if _, err := c.Claim(ctx, "echo", "t1", "", ""); !errors.Is(err, task.ErrConflict) {
		t.Errorf("claim of a finished task: %v", err)
	}
}

// TestClientErrors: each refusal comes back as its task sentinel; anything else reads
// "internal error" and keeps its details in the function's log.
func TestClientErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := newClient(e)
	ctx := context.Background()
	e.fixture(t, "new-1", task.StatusNew, "")
	e.fixture(t, "run-1", task.StatusProcessing, eventLease)

	if _, err := c.Claim(ctx, "echo", "new-1", "", ""); !errors.Is(err, task.ErrConflict) || !strings.Contains(err.Error(), "new") {
		t.Errorf("claim of a task not enqueued: %v", err)
	}
	if _, err := c.Claim(ctx, "echo", "missing-1", "", ""); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("claim of a missing task: %v", err)
	}
	if _, err := c.SetResult(ctx, "echo", "run-1", eventLease, status.Result{Outcome: "maybe"}); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("an unknown outcome: %v", err)
	}
	if _, err := c.SetResult(ctx, "echo", "run-1", eventLease, status.Result{Outcome: status.Success, Result: json.RawMessage(`{not json`)}); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("a result that is not JSON: %v", err)
	}
	if err := c.Heartbeat(ctx, "echo", "run-1", ""); !errors.Is(err, task.ErrInvalid) {
		t.Errorf("a heartbeat without lease: %v", err)
	}
	if got := e.get(t, "run-1"); got.Status != task.StatusProcessing || got.Lease != eventLease {
		t.Errorf("refusals changed the task: %+v", got)
	}

	e.store.Close() // the store fails with an error no sentinel matches
	err := c.Heartbeat(ctx, "echo", "run-1", eventLease)
	if err == nil || err.Error() != "status function: internal error" {
		t.Errorf("heartbeat on a closed store: %v", err)
	}
	for _, kind := range []error{task.ErrNotFound, task.ErrConflict, task.ErrStaleLease, task.ErrInvalid, task.ErrTooLarge, task.ErrThrottled} {
		if errors.Is(err, kind) {
			t.Errorf("an internal error matches %v", kind)
		}
	}
	if logs := e.log.String(); !strings.Contains(logs, `"code":"internal"`) || !strings.Contains(logs, "closed") {
		t.Errorf("the function's log lacks the internal error:\n%s", logs)
	}
}

// TestClientRunsExecutor: the Client is an executor.Status; a run over it records its result,
// and its attempt names the executor's worker and where its logs are, which the claim request
// carries.
func TestClientRunsExecutor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := newClient(e)
	logs := &task.LogLocation{Group: "/aws/lambda/fn-echo", Stream: "fn-echo/stream-1", RequestID: "req-1"}
	ctx := status.WithLogLocation(context.Background(), logs)
	e.fixture(t, "t1", task.StatusEnqueued, "")
	// An interval longer than the test: no heartbeat, the claim starts the task.
	x := executor.New(c, executor.Config{Task: task.Config{HeartbeatInterval: time.Hour, HeartbeatTimeout: 6 * time.Hour}, Logger: slog.New(slog.DiscardHandler), Worker: "fn-echo/stream-1"})
	claimed, err := x.Claim(ctx, "echo", "t1", "")
	if err != nil {
		t.Fatal(err)
	}
	echoes := worker.HandlerFunc(func(ctx context.Context, wt worker.Task) (json.RawMessage, error) {
		fmt.Fprintln(worker.LogOf(ctx), "echoing")
		return wt.Payload, nil
	})
	x.Run(ctx, echo, echoes, claimed)
	if got := e.get(t, "t1"); got.Status != task.StatusSuccess || string(got.Result) != `{"to":"someone"}` {
		t.Errorf("after the run: %+v", got)
	}
	// Where its logs are crosses with the claim; the log itself is in CloudWatch, not sent.
	h, err := e.store.Attempts(ctx, "echo", "t1")
	if err != nil || len(h.Attempts) != 1 || h.Attempts[0].Outcome != task.OutcomeSuccess || h.Attempts[0].Worker != "fn-echo/stream-1" ||
		!reflect.DeepEqual(h.Attempts[0].LogLocation, logs) || h.Attempts[0].Log != "" {
		t.Errorf("history: %+v, %v; want one success by fn-echo/stream-1, its logs at %+v, no log sent", h, err, logs)
	}
}

// lossyLambda serves the Lambda Invoke API with the status function's Handler, as AWS would,
// except that the answer to the first invocation is lost after the function ran: a 500, which
// the SDK's retryer sends again.
func lossyLambda(t *testing.T, h *statusfn.Handler) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req statusfn.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, _ := h.Handle(r.Context(), req)
		if calls.Add(1) == 1 {
			w.Header().Set("X-Amzn-ErrorType", "ServiceException")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"Type":"Service","message":"injected: the answer was lost"}`)
			return
		}
		json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// TestClaimRetriedBySDK: the Lambda client's own retry repeats a claim whose first attempt was
// written. The retry must get that claim back, so the worker runs the task, rather than a
// conflict that acknowledges the message while nobody runs it.
func TestClaimRetriedBySDK(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fixture(t, "t1", task.StatusEnqueued, "")
	srv, calls := lossyLambda(t, e.h)
	client := awslambda.New(awslambda.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	c := statusfn.NewClient(statusfn.LambdaInvoker{Client: client, Function: "atf-status"})
	ctx := context.Background()
	claimed, err := c.Claim(ctx, "echo", "t1", "receipt-of-this-delivery", "")
	if err != nil {
		t.Fatalf("claim retried by the SDK: %v", err)
	}
	if calls.Load() != 2 {
		t.Fatalf("the function was invoked %d times, want 2 (the SDK retried)", calls.Load())
	}
	stored := e.get(t, "t1")
	if claimed.Lease != stored.Lease || stored.Status != task.StatusProcessing || stored.Attempts != 1 {
		t.Fatalf("claimed lease %s; stored %s, lease %s, %d attempts", claimed.Lease, stored.Status, stored.Lease, stored.Attempts)
	}
	if err := c.Heartbeat(ctx, "echo", "t1", claimed.Lease); err != nil {
		t.Fatalf("the retried claim's lease cannot heartbeat: %v", err)
	}
}

// TestLambdaHandlerRefusesOtherLambdas: a status function configured for one lambda refuses
// every op on another lambda's task, as invalid, and leaves the task as it was; so one lambda's
// worker, which may invoke only its own lambda's status function, cannot claim (and read the
// payload of), report or release another lambda's tasks.
func TestLambdaHandlerRefusesOtherLambdas(t *testing.T) {
	e := newEnv(t)
	e.fixture(t, "enq", task.StatusEnqueued, "")
	running := e.fixture(t, "run", task.StatusProcessing, eventLease)
	other := statusfn.NewLambdaHandler(e.hsc, "mail", slog.New(slog.DiscardHandler))
	for _, req := range []statusfn.Request{
		{Op: statusfn.OpClaim, TaskID: "enq", Delivery: "d1"},
		{Op: statusfn.OpHeartbeat, TaskID: "run", Lease: eventLease},
		{Op: statusfn.OpSetResult, TaskID: "run", Lease: eventLease, Outcome: status.Success},
		{Op: statusfn.OpRelease, TaskID: "run", Lease: eventLease},
	} {
		req.V, req.Lambda = statusfn.Version, echo.Name
		before := e.get(t, req.TaskID)
		resp, err := other.Handle(context.Background(), req)
		if err != nil || resp.Error == nil || resp.Error.Code != "invalid" || resp.Task != nil || resp.Lease != "" {
			t.Errorf("%s of lambda echo's task by lambda mail's handler: %+v, %v; want refused as invalid", req.Op, resp, err)
		}
		if after := e.get(t, req.TaskID); after.Version != before.Version || after.Status != before.Status {
			t.Errorf("%s by lambda mail's handler moved the task: %s v%d, was %s v%d", req.Op, after.Status, after.Version, before.Status, before.Version)
		}
	}
	// Its own lambda's handler serves the same requests.
	own := statusfn.NewLambdaHandler(e.hsc, echo.Name, slog.New(slog.DiscardHandler))
	resp, err := own.Handle(context.Background(), statusfn.Request{V: statusfn.Version, Op: statusfn.OpClaim, Lambda: echo.Name, TaskID: "enq", Delivery: "d1"})
	if err != nil || resp.Error != nil || resp.Lease == "" {
		t.Fatalf("claim by lambda echo's own handler: %+v, %v", resp, err)
	}
	resp, err = own.Handle(context.Background(), statusfn.Request{V: statusfn.Version, Op: statusfn.OpHeartbeat, Lambda: echo.Name, TaskID: "run", Lease: running.Lease})
	if err != nil || resp.Error != nil {
		t.Fatalf("heartbeat by lambda echo's own handler: %+v, %v", resp, err)
	}
}

// TestClientSendsDelay: the Client carries a result's delay to the controller, to the
// nanosecond: a snooze, and a retry after it.
func TestClientSendsDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := newClient(e)
	d := 90*time.Second + time.Nanosecond
	for _, r := range []status.Result{{Outcome: status.Snoozed, Delay: &d}, {Outcome: status.Retriable, Error: "429", Delay: &d}} {
		id := "delay-" + string(r.Outcome)
		e.fixture(t, id, task.StatusProcessing, eventLease)
		got, err := c.SetResult(context.Background(), echo.Name, id, eventLease, r)
		if err != nil || got.NextTriggerAt == nil || !got.NextTriggerAt.Equal(got.UpdatedAt.Add(d)) {
			t.Errorf("%s: due %v after an update at %v, %v; want %s later", r.Outcome, got.NextTriggerAt, got.UpdatedAt, err, d)
		}
	}
}

// deadlineSeen is a store that records the deadline of the context of its last read.
type deadlineSeen struct {
	task.Store
	deadline time.Time
	ok       bool
}

func (s *deadlineSeen) Get(ctx context.Context, lambda, id string) (task.Task, error) {
	s.deadline, s.ok = ctx.Deadline()
	return s.Store.Get(ctx, lambda, id)
}

// detached invokes the status function with none of the caller's context, as Lambda does: the
// function has a deadline of its own, not the worker's.
type detached struct{ statusfn.LocalInvoker }

func (d detached) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	return d.LocalInvoker.Invoke(context.WithoutCancel(ctx), payload)
}

// TestClaimBoundedByCallersTime: a claim carries the time its caller waits for it, and the status
// function's claim (with its wait for a task's create) ends by then, not by its own deadline:
// a claim the worker gave up on does not go on to claim the task under a lease nobody holds.
func TestClaimBoundedByCallersTime(t *testing.T) {
	e := newEnv(t)
	seen := &deadlineSeen{Store: e.store}
	h := statusfn.NewHandler(status.New(seen, status.Config{Task: cfg, EarlyWait: -1}), slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	callerEnd, _ := ctx.Deadline()
	if _, err := statusfn.NewClient(detached{statusfn.LocalInvoker{Handler: h}}).Claim(ctx, echo.Name, "absent", "receipt", "token"); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("claim: %v, want not found", err)
	}
	if !seen.ok || seen.deadline.After(callerEnd.Add(time.Second)) {
		t.Fatalf("the claim's read had deadline %v (%v); want one by the caller's, %v", seen.deadline, seen.ok, callerEnd)
	}
}
