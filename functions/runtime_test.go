package functions_test

// The function binaries as AWS Lambda runs them: each main of functions/ built as `make build`
// builds it (for this machine's GOOS and GOARCH), run as a child process under the Lambda
// Runtime API harness (shared/testkit/lambdaruntime), on DynamoDB and SQS (the emulators in
// `make test`), fed the sample events of events/ and real flows. A worker's status calls go
// through the Lambda Invoke API to the real status binary.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/testkit/lambdaruntime"
)

// bins holds the built binaries, by the name of their folder: api, consumer, status, executor,
// the workers (echo, flaky, ...) and faulty (testdata/faulty, a test-only function).
var bins string

// workers are the folders of functions/workers.
var workers []string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dirs, err := filepath.Glob("workers/*")
	if err != nil || len(dirs) == 0 {
		fmt.Fprintf(os.Stderr, "no workers in functions/workers: %v\n", err)
		return 1
	}
	pkgs := []string{"./api", "./consumer", "./status", "./executor", "./testdata/faulty"}
	for _, d := range dirs {
		workers = append(workers, filepath.Base(d))
		pkgs = append(pkgs, "./"+d)
	}
	if bins, err = os.MkdirTemp("", "atf-functions"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bins)
	// The flags of make build, for this machine; one go build, which builds them in parallel.
	build := exec.Command("go", append([]string{"build", "-trimpath", "-ldflags=-s -w", "-tags", "lambda.norpc", "-o", bins + "/"}, pkgs...)...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the functions: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// deployed is the lambda registry the stack is built from (lambdas.json), and the lambdas as
// `make invoke` passes them: the registry's, then every worker of functions/workers it lacks.
type deployed struct {
	reg     *registry.Registry
	lambdas []task.Lambda
	specs   []awsfn.LambdaSpec
}

func loadDeployed(t *testing.T) deployed {
	t.Helper()
	reg, err := registry.Load("../lambdas.json")
	if err != nil {
		t.Fatal(err)
	}
	js, err := reg.LambdasJSON()
	if err != nil {
		t.Fatal(err)
	}
	d := deployed{reg: reg}
	if err := json.Unmarshal([]byte(js), &d.specs); err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		if _, ok := reg.Lambda(w); !ok {
			d.specs = append(d.specs, awsfn.LambdaSpec{Name: w})
		}
	}
	for _, s := range d.specs {
		l, err := s.Lambda()
		if err != nil {
			t.Fatal(err)
		}
		d.lambdas = append(d.lambdas, l)
	}
	return d
}

// lambdasJSON is ATF_LAMBDAS: the named lambdas only (a worker's and a status function's own, as
// the stack sets it), or every one.
func (d deployed) lambdasJSON(t *testing.T, names ...string) string {
	t.Helper()
	specs := slices.DeleteFunc(slices.Clone(d.specs), func(s awsfn.LambdaSpec) bool {
		return len(names) > 0 && !slices.Contains(names, s.Name)
	})
	b, err := json.Marshal(specs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (d deployed) lambda(t *testing.T, name string) task.Lambda {
	t.Helper()
	for _, l := range d.lambdas {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no lambda %s", name)
	return task.Lambda{}
}

// batchSize is the batch size of the lambda's deployed event source mappings, as the registry
// sets it; the registry's default for a worker it lacks.
func (d deployed) batchSize(name string) int {
	if e, ok := d.reg.Lambda(name); ok && e.Function != nil {
		return e.Function.BatchSize
	}
	return min(task.DefaultConcurrency, registry.DefaultFunctionBatchSize)
}

// env is a table and queues on the emulators, as `atf create` makes them, and the functions
// run on them.
type env struct {
	deployed
	b      awstest.Backend
	invoke *lambdaruntime.InvokeServer
	logs   *lambdaruntime.LogBuffer // every function's log
	path   string                   // ATF_LAMBDAS_PATH, once written (lambdasPath)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	d := loadDeployed(t)
	e := &env{deployed: d, b: awstest.NewBackend(t, "atf-rt", d.lambdas...), invoke: lambdaruntime.NewInvokeServer(), logs: &lambdaruntime.LogBuffer{}}
	t.Cleanup(func() {
		e.invoke.Close()
		if t.Failed() {
			t.Logf("the functions' logs:\n%s", e.logs.String())
		}
	})
	return e
}

// function runs the binary of folder bin as the function name, with the environment the stack
// gives every function plus vars; its status calls go to the Invoke API server.
func (e *env) function(t *testing.T, name, bin string, timeout time.Duration, vars map[string]string) *lambdaruntime.Function {
	t.Helper()
	fenv := lambdaruntime.EnvFromOS()
	maps.Copy(fenv, map[string]string{
		awsfn.EnvTable: e.b.Name, awsfn.EnvQueuePrefix: e.b.Name, awsfn.EnvLambdas: e.lambdasJSON(t),
		"AWS_ENDPOINT_URL_LAMBDA": e.invoke.URL,
	})
	maps.Copy(fenv, vars)
	f := &lambdaruntime.Function{
		Name: name, Binary: filepath.Join(bins, bin), Timeout: timeout, Env: fenv,
		Logs: prefixed(e.logs, name),
	}
	e.invoke.Add(f)
	t.Cleanup(func() { f.Close() })
	return f
}

// lambdasPath writes each lambda, as the parameter of a stack of its own, under the SSM path
// that the API and consumer functions read (ATF_LAMBDAS_PATH), as the lambda stacks do, and
// returns the path.
func (e *env) lambdasPath(t *testing.T) string {
	t.Helper()
	if e.path == "" {
		path := awsfn.LambdasPath(e.b.Name)
		var params []string
		for _, l := range e.lambdas {
			params = append(params, path+l.Name, e.lambdasJSON(t, l.Name))
		}
		awstest.PutParameters(t, awstest.NewSSM(t), params...)
		e.path = path
	}
	return e.path
}

// api, consumer, status and worker are the functions as the stack configures them: the API and
// the consumer learn the lambdas from SSM, the others from their own entry in ATF_LAMBDAS.
func (e *env) api(t *testing.T) *lambdaruntime.Function {
	return e.function(t, e.b.Name+"-api", "api", 29*time.Second, map[string]string{awsfn.EnvLambdas: "", awsfn.EnvLambdasPath: e.lambdasPath(t)})
}

func (e *env) consumer(t *testing.T) *lambdaruntime.Function {
	return e.function(t, e.b.Name+"-consumer", "consumer", 90*time.Second, map[string]string{awsfn.EnvLambdas: "", awsfn.EnvLambdasPath: e.lambdasPath(t)})
}

func (e *env) status(t *testing.T, lambda string) *lambdaruntime.Function {
	return e.function(t, e.b.Name+"-"+lambda+"-status", "status", 10*time.Second, map[string]string{
		awsfn.EnvLambda: lambda, awsfn.EnvLambdas: e.lambdasJSON(t, lambda),
	})
}

// worker is the worker function of lambda, with its status function beside it; its timeout
// is the lambda's plus sqsworker's margin, as the stack sets it.
func (e *env) worker(t *testing.T, lambda string) (worker, status *lambdaruntime.Function) {
	st := e.status(t, lambda)
	return e.function(t, e.b.Name+"-"+lambda+"-worker", lambda, e.lambda(t, lambda).Timeout+sqsworker.DefaultMargin, map[string]string{
		awsfn.EnvLambda: lambda, awsfn.EnvLambdas: e.lambdasJSON(t, lambda), awsfn.EnvStatusFunction: st.Name,
	}), st
}

// gateway serves HTTP through the API function as API Gateway does, with the stack's IAM
// authorization (SigV4); the client talks to it, signing.
func (e *env) gateway(t *testing.T, api *lambdaruntime.Function) *client.Client {
	creds := aws.Credentials{AccessKeyID: "AKIDFUNCTIONS", SecretAccessKey: "functions-secret"}
	srv := httptest.NewServer(lambdaruntime.APIGateway{Function: api, Auth: &lambdaruntime.SigV4{
		Region: lambdaruntime.DefaultRegion, Credentials: lambdaruntime.StaticCredentials(creds),
	}})
	t.Cleanup(srv.Close)
	signing := &aws.Config{Region: lambdaruntime.DefaultRegion, Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return creds, nil
	})}
	return &client.Client{Endpoint: srv.URL, MaxWait: 5 * time.Second, SigV4: signing}
}

// invoke runs f once on event and fails the test if the function fails.
func invoke(t *testing.T, f *lambdaruntime.Function, event any, timeout time.Duration) []byte {
	t.Helper()
	payload, ok := event.([]byte)
	if !ok {
		var err error
		if payload, err = json.Marshal(event); err != nil {
			t.Fatal(err)
		}
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	out, ferr, err := f.Invoke(t.Context(), payload, deadline)
	if err != nil || ferr != nil {
		t.Fatalf("invoke %s: %v, %v", f.Name, err, ferr)
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// put stores task id of lambda as the consumer leaves it: due, then enqueued after attempts
// earlier retriable failures; or, if done, finished with a success.
func (e *env) put(t *testing.T, l task.Lambda, id, payload string, attempts int, enqueue, done bool) {
	t.Helper()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC().Add(-time.Hour)
	tk, err := task.New(task.Spec{ID: id, Payload: json.RawMessage(payload)}, l, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	step := func(next task.Task, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		tk = next
	}
	if enqueue {
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
	}
	if err := e.b.Store.Create(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
}

func (e *env) get(t *testing.T, lambda, id string) task.Task {
	t.Helper()
	tk, err := e.b.Store.Get(t.Context(), lambda, id)
	if err != nil {
		t.Fatalf("get %s/%s: %v", lambda, id, err)
	}
	return tk
}

// receive takes up to n messages from the lambda's queue of priority, waiting for at least one
// (and at most 20 s), as an event source mapping receives a batch, and returns them with the
// queue's ARN.
func (e *env) receive(t *testing.T, lambda, priority string, n int) (string, []sqstypes.Message) {
	t.Helper()
	name, err := sqsqueue.QueueName(e.b.Name, lambda, priority)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	url, err := e.b.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := e.b.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		out, err := e.b.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: url.QueueUrl, MaxNumberOfMessages: int32(n), WaitTimeSeconds: 1, VisibilityTimeout: 60,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("receive from %s: %v", name, err)
		}
		if len(out.Messages) > 0 {
			// Acknowledged up front: the tests check the function's batch response instead.
			for _, m := range out.Messages {
				_, _ = e.b.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url.QueueUrl, ReceiptHandle: m.ReceiptHandle})
			}
			return attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)], out.Messages
		}
	}
	t.Fatalf("no message on %s within 20 s", name)
	return "", nil
}

// sqsEvent is the event the lambda's event source mapping sends for msgs of the queue arn.
func (e *env) sqsEvent(arn string, msgs []sqstypes.Message) events.SQSEvent {
	return lambdaruntime.SQSEvent(arn, e.b.SQS.Options().Region, msgs)
}

// batchFailures is the ids a worker's answer reports in batchItemFailures.
func batchFailures(t *testing.T, out []byte) []string {
	t.Helper()
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("a worker's answer %s: %v", out, err)
	}
	ids := []string{}
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// TestAPIEvents feeds every sample event of events/api to the api binary, on a table holding
// one task, evt-1 of echo, and checks each answer's status and body.
func TestAPIEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, e.lambda(t, "echo"), "evt-1", `{"n":1}`, 0, false, false)
	api := e.api(t)
	cases := map[string]struct {
		status int
		body   string // the compact body contains it
	}{
		"schedule.json": {201, `"id":"evt-new"`}, "get.json": {200, `"status":"new"`},
		"get-missing.json": {404, `"code":"not_found"`}, "list.json": {200, `"id":"evt-1"`},
		"gate.json": {200, `"mode":"pause"`}, "lambdas.json": {200, `"name":"echo"`},
		"bad-json.json": {400, `"code":"malformed"`}, "bad-priority.json": {422, `"code":"invalid"`},
		"bad-delay.json": {422, `delay must not be negative`}, "unknown-lambda.json": {404, `"code":"not_found"`},
		"cancel.json": {200, `"status":"cancelled"`},
	}
	files, err := filepath.Glob("../events/api/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample events: %v", err)
	}
	// cancel.json ends evt-1, which get.json and list.json read: it goes last.
	last := func(f string) int {
		if filepath.Base(f) == "cancel.json" {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(files, func(a, b string) int { return cmp.Compare(last(a), last(b)) })
	for _, f := range files {
		name := filepath.Base(f)
		want, ok := cases[name]
		if !ok {
			t.Errorf("events/api/%s has no expected answer here", name)
			continue
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(invoke(t, api, readFile(t, f), 0), &resp); err != nil {
			t.Fatalf("%s: the answer is not a proxy response: %v", name, err)
		}
		var body bytes.Buffer
		if err := json.Compact(&body, []byte(resp.Body)); err != nil {
			t.Errorf("%s: body is not JSON: %s", name, resp.Body)
		}
		if resp.StatusCode != want.status || !strings.Contains(body.String(), want.body) {
			t.Errorf("%s: %d %s, want %d containing %s", name, resp.StatusCode, body.String(), want.status, want.body)
		}
	}
	if got := e.get(t, "echo", "evt-new"); got.Priority != "high" || string(got.Payload) != `{"hi":"there"}` {
		t.Errorf("the scheduled task: %+v", got)
	}
	if api.Starts() != 1 {
		t.Errorf("%d cold starts for the api function, want 1: an environment serves invocation after invocation", api.Starts())
	}
}

// TestConsumerEvent feeds events/eventbridge/scheduled.json to the consumer binary: it answers
// null and sends the due task to its queue.
func TestConsumerEvent(t *testing.T) {
	t.Parallel()
	// The one sample of events/eventbridge is the rule's; another would need its own case here.
	if files, _ := filepath.Glob("../events/eventbridge/*.json"); len(files) != 1 || filepath.Base(files[0]) != "scheduled.json" {
		t.Errorf("events/eventbridge holds %v; TestConsumerEvent knows scheduled.json only: add a case for the others", files)
	}
	e := newEnv(t)
	echo := e.lambda(t, "echo")
	e.put(t, echo, "consumer-due-1", `{"due":true}`, 0, false, false)
	out := invoke(t, e.consumer(t), readFile(t, "../events/eventbridge/scheduled.json"), 10*time.Second)
	if string(out) != "null" {
		t.Errorf("the consumer answered %s, want null", out)
	}
	if got := e.get(t, "echo", "consumer-due-1"); got.Status != task.StatusEnqueued {
		t.Errorf("the due task is %s, want enqueued", got.Status)
	}
	_, msgs := e.receive(t, "echo", echo.DefaultPriority(), 10)
	var m task.Message
	if len(msgs) != 1 || json.Unmarshal([]byte(aws.ToString(msgs[0].Body)), &m) != nil || m.TaskID != "consumer-due-1" {
		t.Errorf("the queue holds %d messages (%+v), want the due task's", len(msgs), m)
	}
}

// statusEventLease is the lease of every sample event in events/status.
const statusEventLease = "Q7B2XKZ4MNW5RJ3TVCYH6DLPEA"

// TestStatusEvents feeds every sample event of events/status to the status binary of echo, each
// on the task it names in the status it needs, and checks the answer and the task after.
func TestStatusEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	echo := e.lambda(t, "echo")
	st := e.status(t, "echo")
	cases := map[string]struct {
		fixture task.Status // the task's status before; none if empty
		lease   string      // the fixture's lease [statusEventLease]
		code    string      // the answer's error code; empty for success
		failed  bool        // the invocation fails (a function error)
		after   task.Status // the task's status after [fixture]
	}{
		"claim.json":                   {fixture: task.StatusEnqueued, after: task.StatusProcessing},
		"claim-not-enqueued.json":      {fixture: task.StatusNew, code: "conflict"},
		"claim-not-found.json":         {code: "not_found"},
		"heartbeat.json":               {fixture: task.StatusProcessing},
		"heartbeat-stale-lease.json":   {fixture: task.StatusProcessing, lease: "SOMEONEELSESLEASE234567ABC", code: "stale_lease"},
		"heartbeat-without-lease.json": {fixture: task.StatusProcessing, code: "invalid"},
		"set-result-success.json":      {fixture: task.StatusProcessing, after: task.StatusSuccess},
		// The deployed function has the queues: a retry due within the minute is sent ahead.
		"set-result-retriable.json":   {fixture: task.StatusProcessing, after: task.StatusEnqueued},
		"set-result-fatal.json":       {fixture: task.StatusProcessing, after: task.StatusFatalFailure},
		"set-result-bad-outcome.json": {fixture: task.StatusProcessing, code: "invalid"},
		// A snooze counts no attempt; a retry after 2 h is beyond what is sent ahead.
		"set-result-snoozed.json":     {fixture: task.StatusProcessing, after: task.StatusNew},
		"set-result-retry-after.json": {fixture: task.StatusProcessing, after: task.StatusRetriableFailure},
		"set-result-bad-delay.json":   {fixture: task.StatusProcessing, code: "invalid"},
		"release.json":                {fixture: task.StatusProcessing, after: task.StatusNew},
		"unknown-op.json":             {fixture: task.StatusProcessing, code: "invalid"},
		"unsupported-version.json":    {fixture: task.StatusProcessing, code: "invalid"},
		"missing-version.json":        {fixture: task.StatusEnqueued, code: "invalid"},
		"malformed-fields.json":       {code: "invalid"},
		"wrong-type.json":             {fixture: task.StatusEnqueued, failed: true},
	}
	files, err := filepath.Glob("../events/status/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample events: %v", err)
	}
	cfg := task.Config{}.WithDefaults()
	for _, f := range files {
		name := filepath.Base(f)
		c, ok := cases[name]
		if !ok {
			t.Errorf("events/status/%s has no expected answer here", name)
			continue
		}
		payload := readFile(t, f)
		var req struct {
			TaskID string `json:"task_id"`
		}
		_ = json.Unmarshal(payload, &req) // wrong-type.json does not decode as a request; its id does
		if c.fixture != "" {
			now := time.Now().UTC()
			tk, err := task.New(task.Spec{ID: req.TaskID, Payload: json.RawMessage(`{"to":"someone"}`)}, echo, now, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if c.fixture != task.StatusNew {
				if tk, err = task.Enqueue(tk, now, cfg); err != nil {
					t.Fatal(err)
				}
			}
			if c.fixture == task.StatusProcessing {
				if tk, err = task.Claim(tk, cmp.Or(c.lease, statusEventLease), now, cfg); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.b.Store.Create(t.Context(), tk); err != nil {
				t.Fatal(err)
			}
		}
		out, ferr, err := st.Invoke(t.Context(), payload, time.Time{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.failed {
			if ferr == nil {
				t.Errorf("%s: answered %s, want the invocation to fail", name, out)
			}
			continue
		}
		if ferr != nil {
			t.Errorf("%s: the function failed: %v", name, ferr)
			continue
		}
		var resp struct {
			Error *struct{ Code string } `json:"error"`
		}
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Errorf("%s: answer %s: %v", name, out, err)
			continue
		}
		if got := ""; resp.Error != nil || c.code != "" {
			if resp.Error != nil {
				got = resp.Error.Code
			}
			if got != c.code {
				t.Errorf("%s: answered %s, want error code %q", name, out, c.code)
			}
		}
		if c.fixture != "" {
			if got, want := e.get(t, "echo", req.TaskID).Status, cmp.Or(c.after, c.fixture); got != want {
				t.Errorf("%s: the task is %s after, want %s", name, got, want)
			}
		}
	}
}

// TestStatusUnits: the status binary with a metrics namespace writes, at the end of its first
// invocation, one EMF line of the capacity units its store calls consumed for the lambda (DynamoDB
// Local reports them as DynamoDB does) and the invocation that made them; the invocations after
// it within the minute add to the next line rather than write one each.
func TestStatusUnits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	echo := e.lambda(t, "echo")
	name := e.b.Name + "-echo-status-units"
	st := e.function(t, name, "status", 10*time.Second, map[string]string{
		awsfn.EnvLambda: "echo", awsfn.EnvLambdas: e.lambdasJSON(t, "echo"), awsfn.EnvMetricsNamespace: "atf/test",
	})
	for _, id := range []string{"units-1", "units-2", "units-3"} {
		e.put(t, echo, id, `{}`, 0, true, false)
		// As a worker function claims: naming the message, which times the lease.
		invoke(t, st, map[string]any{"v": 1, "op": "claim", "lambda": "echo", "task_id": id, "message_id": "m-" + id}, 0)
	}
	var lines []map[string]any
	for line := range strings.Lines(e.logs.String()) {
		if rest, ok := strings.CutPrefix(line, name+": "); ok && strings.Contains(rest, `"WriteUnits"`) {
			var v map[string]any
			if err := json.Unmarshal([]byte(rest), &v); err != nil {
				t.Fatalf("not a JSON line: %q", rest)
			}
			lines = append(lines, v)
		}
	}
	// e.put writes its task first, with the resend entry the model leaves out (it takes an
	// enqueued task as sent first): the claim moves it, one write more.
	claim := cost.TransitionUnits(task.StatusEnqueued, task.StatusProcessing)
	claim.Write += cost.DueEntryWrite
	if len(lines) != 1 || lines[0]["Lambda"] != "echo" || lines[0]["Invocations"] != 1.0 ||
		lines[0]["WriteUnits"] != claim.Write || lines[0]["ReadUnits"].(float64) < claim.Read {
		t.Errorf("units lines %v, want one of lambda echo: 1 invocation, its claim's %v WRU and at least %v RRU", lines, claim.Write, claim.Read)
	}
}

// TestSQSEvents feeds every sample event of events/sqs to the echo worker binary, whose claims,
// heartbeats and results go through the Invoke API to the status binary, and checks its batch
// response and the tasks after.
func TestSQSEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	echo := e.lambda(t, "echo")
	worker, _ := e.worker(t, "echo")
	type want struct {
		status   task.Status
		result   string
		attempts int
	}
	cases := map[string]struct {
		fixtures func()
		failed   []int // the records reported in batchItemFailures
		tasks    map[string]want
	}{
		"one.json": {
			fixtures: func() { e.put(t, echo, "sqs-one-1", `{"hi":"there"}`, 0, true, false) },
			tasks:    map[string]want{"sqs-one-1": {task.StatusSuccess, `{"hi":"there"}`, 1}},
		},
		"several.json": {
			fixtures: func() {
				e.put(t, echo, "sqs-several-ok", `{"n":1}`, 0, true, false)
				e.put(t, echo, "sqs-several-retry", `{"n":2}`, 1, true, false)
				e.put(t, echo, "sqs-several-fatal", `{"n":3}`, 0, true, false)
			},
			tasks: map[string]want{
				"sqs-several-ok":    {task.StatusSuccess, `{"n":1}`, 1},
				"sqs-several-retry": {task.StatusSuccess, `{"n":2}`, 2},
				"sqs-several-fatal": {task.StatusSuccess, `{"n":3}`, 1},
			},
		},
		"duplicate.json": {
			fixtures: func() { e.put(t, echo, "sqs-dup-1", `"once"`, 0, true, false) },
			tasks:    map[string]want{"sqs-dup-1": {task.StatusSuccess, `"once"`, 1}},
		},
		"finished.json": {
			fixtures: func() { e.put(t, echo, "sqs-finished-1", `{}`, 0, true, true) },
			tasks:    map[string]want{"sqs-finished-1": {task.StatusSuccess, `"earlier"`, 1}},
		},
		"poison.json": {
			fixtures: func() { e.put(t, echo, "sqs-poison-ok", `"fine"`, 0, true, false) },
			failed:   []int{0, 1, 2},
			tasks:    map[string]want{"sqs-poison-ok": {task.StatusSuccess, `"fine"`, 1}},
		},
	}
	files, err := filepath.Glob("../events/sqs/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample events: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		c, ok := cases[name]
		if !ok {
			t.Errorf("events/sqs/%s has no expected answer here", name)
			continue
		}
		c.fixtures()
		raw := readFile(t, f)
		var ev events.SQSEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		wantFailed := []string{}
		for _, i := range c.failed {
			wantFailed = append(wantFailed, ev.Records[i].MessageId)
		}
		if got := batchFailures(t, invoke(t, worker, raw, 0)); !slices.Equal(got, wantFailed) {
			t.Errorf("%s: batchItemFailures %v, want %v", name, got, wantFailed)
		}
		for id, w := range c.tasks {
			var result bytes.Buffer
			got := e.get(t, "echo", id)
			_ = json.Compact(&result, got.Result)
			if got.Status != w.status || result.String() != w.result || got.Attempts != w.attempts {
				t.Errorf("%s: task %s is %s, result %s, %d attempts; want %s, %s, %d (error %q)",
					name, id, got.Status, result.String(), got.Attempts, w.status, w.result, w.attempts, got.Error)
			}
		}
	}
}

// TestWorkers runs a task of every worker of functions/workers through the binaries, as
// deployed: scheduled through the api function behind the API Gateway proxy (a task due now
// goes to its queue at once), received from its queue in a batch of the deployed size, fed
// to the worker as its event source mapping would, claimed and finished through the status
// function; its result read back through the api function.
func TestWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.gateway(t, e.api(t))
	runs := map[string]struct{ payload, result string }{
		"echo":  {`{"hi":"there"}`, `{"hi":"there"}`},
		"flaky": {`{"failures":0}`, `{"succeeded_on_attempt":1}`},
		"join":  {``, `{}`},
		"sleep": {`{"seconds":0.1}`, `{"slept_seconds":0.1}`},
	}
	for _, w := range workers {
		run, ok := runs[w]
		if !ok {
			t.Errorf("functions/workers/%s has no run here: add one to TestWorkers", w)
			continue
		}
		t.Run(w, func(t *testing.T) {
			t.Parallel()
			l := e.lambda(t, w)
			id := "rt-" + w
			if _, _, err := c.Schedule(t.Context(), w, client.ScheduleRequest{ID: id, Payload: json.RawMessage(run.payload)}); err != nil {
				t.Fatalf("schedule: %v", err)
			}
			arn, msgs := e.receive(t, w, l.DefaultPriority(), e.batchSize(w))
			worker, status := e.worker(t, w)
			if got := batchFailures(t, invoke(t, worker, e.sqsEvent(arn, msgs), 0)); len(got) != 0 {
				t.Errorf("batchItemFailures %v, want none", got)
			}
			if status.Starts() == 0 {
				t.Error("the worker's status calls did not reach the status function")
			}
			got, err := c.Get(t.Context(), w, id)
			var result bytes.Buffer
			_ = json.Compact(&result, got.Result)
			if err != nil || got.Status != task.StatusSuccess || result.String() != run.result {
				t.Errorf("task %s, result %s, %v; want success with %s (error %q)", got.Status, result.String(), err, run.result, got.Error)
			}
		})
	}
}

// TestWorkerDeadline runs the real sleep worker past its invocation's deadline: an invocation
// given less than the lambda's timeout plus the margin (a function configured too short) cuts
// the handler margin (sqsworker.DefaultMargin) before the deadline and counts a timed-out
// attempt, reported through the status function; the invocation itself answers in time, and
// the task is not left processing for the consumer's heartbeat timeout.
func TestWorkerDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.gateway(t, e.api(t))
	l := e.lambda(t, "sleep")
	if _, _, err := c.Schedule(t.Context(), "sleep", client.ScheduleRequest{ID: "past-deadline", Payload: json.RawMessage(`{"seconds":60}`)}); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	arn, msgs := e.receive(t, "sleep", l.DefaultPriority(), 1)
	worker, _ := e.worker(t, "sleep")
	if got := batchFailures(t, invoke(t, worker, e.sqsEvent(arn, msgs), sqsworker.DefaultMargin+2*time.Second)); len(got) != 0 {
		t.Errorf("batchItemFailures %v, want none: the task's attempt was reported", got)
	}
	got, err := c.Get(t.Context(), "sleep", "past-deadline")
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempts != 1 || (got.Status != task.StatusRetriableFailure && got.Status != task.StatusEnqueued) || got.Error == "" {
		t.Errorf("task %s after %d attempts, error %q; want its attempt counted as timed out and a retry waiting", got.Status, got.Attempts, got.Error)
	}
}

// TestGatedFlow is the consumer's part of a flow, through the binaries: a task scheduled while
// its lambda is paused waits (the api function does not send it ahead); once the gate opens the
// consumer function's sweep sends it to its queue, the echo worker runs it, and the api
// function answers it succeeded.
func TestGatedFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.gateway(t, e.api(t))
	ctx := t.Context()
	echo := e.lambda(t, "echo")
	if _, err := c.SetGate(ctx, "echo", "", "pause"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Schedule(ctx, "echo", client.ScheduleRequest{ID: "gated-1", Payload: json.RawMessage(`{"gated":true}`)}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "echo", "gated-1"); err != nil || got.Status != task.StatusNew {
		t.Fatalf("a task of a paused lambda: %s, %v; want new", got.Status, err)
	}
	if _, err := c.SetGate(ctx, "echo", "", "open"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	scheduled := events.EventBridgeEvent{Version: "0", DetailType: "Scheduled Event", Source: "aws.events", Time: now, Detail: json.RawMessage(`{}`)}
	if out := invoke(t, e.consumer(t), scheduled, 5*time.Second); string(out) != "null" {
		t.Errorf("the consumer answered %s, want null", out)
	}
	arn, msgs := e.receive(t, "echo", echo.DefaultPriority(), e.batchSize("echo"))
	worker, _ := e.worker(t, "echo")
	if got := batchFailures(t, invoke(t, worker, e.sqsEvent(arn, msgs), 0)); len(got) != 0 {
		t.Errorf("batchItemFailures %v, want none", got)
	}
	got, err := c.GetWait(ctx, "echo", "gated-1", 5*time.Second)
	if err != nil || got.Status != task.StatusSuccess || string(got.Result) != `{"gated":true}` || got.Attempts != 1 {
		t.Errorf("the task: %s, result %s, %d attempts, %v; want success with its payload after 1", got.Status, got.Result, got.Attempts, err)
	}
}

// TestFaults: a handler that panics is reported through /error with its message and stack, and
// the next invocation gets a fresh process; one that outlives its deadline is reported as a
// timeout, and the next invocation works. The function is testdata/faulty, built as the others.
func TestFaults(t *testing.T) {
	t.Parallel()
	logs := &lambdaruntime.LogBuffer{}
	f := &lambdaruntime.Function{Name: "faulty", Binary: filepath.Join(bins, "faulty"), Timeout: 5 * time.Second, Logs: logs}
	t.Cleanup(func() {
		f.Close()
		if t.Failed() {
			t.Logf("the function's log:\n%s", logs.String())
		}
	})
	if out := invoke(t, f, map[string]string{"do": "echo"}, 0); string(out) != `{"do":"echo"}` {
		t.Errorf("answer %s", out)
	}
	_, ferr, err := f.Invoke(t.Context(), []byte(`{"do":"panic"}`), time.Time{})
	if err != nil || ferr == nil || ferr.Message != "faulty: a panic on purpose" || ferr.Type != "string" || len(ferr.StackTrace) == 0 {
		t.Fatalf("a panic: %+v, %v; want its message, type and stack", ferr, err)
	}
	if out := invoke(t, f, map[string]string{"do": "after panic"}, 0); string(out) != `{"do":"after panic"}` || f.Starts() != 2 {
		t.Errorf("after a panic: %s after %d starts, want an answer from a fresh process", out, f.Starts())
	}
	_, ferr, err = f.Invoke(t.Context(), []byte(`{"do":"hang"}`), time.Now().Add(time.Second))
	if err != nil || ferr == nil || !ferr.Timeout() {
		t.Fatalf("past its deadline: %+v, %v; want a timeout", ferr, err)
	}
	if out := invoke(t, f, map[string]string{"do": "after timeout"}, 0); string(out) != `{"do":"after timeout"}` || f.Starts() != 3 {
		t.Errorf("after a timeout: %s after %d starts, want an answer from a fresh process", out, f.Starts())
	}
}

// TestExecutorBinary: the executor is an ECS container's main, not a Lambda function: built
// with the same flags, it refuses to start without its configuration, saying why, exit 2.
func TestExecutorBinary(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(filepath.Join(bins, "executor"))
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), awsfn.EnvTable) {
		t.Errorf("exit %v, output %s; want 2, naming %s", cmd.ProcessState, out, awsfn.EnvTable)
	}
}

// prefixed writes each line to w after name, so that one log holds several functions'.
func prefixed(w *lambdaruntime.LogBuffer, name string) *prefixWriter {
	return &prefixWriter{w: w, name: name}
}

type prefixWriter struct {
	w    *lambdaruntime.LogBuffer
	name string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	for line := range strings.Lines(string(b)) {
		_, _ = p.w.Write([]byte(p.name + ": " + line))
	}
	return len(b), nil
}
