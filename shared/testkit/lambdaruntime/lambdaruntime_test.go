package lambdaruntime_test

// The harness on its own: this test binary is also the function it runs. Started with
// FAKE_RUNTIME set, TestMain serves a handler under aws-lambda-go's runtime client (the one the
// real functions use) whose event says how to behave.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/openatf/atf/shared/testkit/lambdaruntime"
)

func TestMain(m *testing.M) {
	switch os.Getenv("FAKE_RUNTIME") {
	case "":
		os.Exit(m.Run())
	case "serve":
		lambda.Start(fake)
	case "init-error":
		// What a runtime does when it cannot start: say why, then exit.
		api := "http://" + os.Getenv("AWS_LAMBDA_RUNTIME_API") + "/2018-06-01/runtime/init/error"
		req, _ := http.NewRequest(http.MethodPost, api, strings.NewReader(`{"errorMessage":"no config","errorType":"Config.Missing"}`))
		req.Header.Set(lambdaruntime.HeaderFunctionErrorType, "Config.Missing")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		os.Exit(1)
	case "crash":
		os.Exit(2)
	}
}

type event struct {
	Do string `json:"do"`
	// Body is a proxy event's: the fake reads what to do from the request's body.
	Body           string            `json:"body"`
	Resource       string            `json:"resource"`
	PathParameters map[string]string `json:"pathParameters"`
}

// fake is the handler of the fake function.
func fake(ctx context.Context, e event) (any, error) {
	if e.Do == "" && e.Body != "" {
		_ = json.Unmarshal([]byte(e.Body), &e)
	}
	switch e.Do {
	case "proxy": // answers the proxy event's resource and path parameters
		var params []string
		for k, v := range e.PathParameters {
			params = append(params, k+"="+v)
		}
		return map[string]any{"statusCode": 200, "body": e.Resource + " " + strings.Join(params, ",")}, nil
	case "big":
		return strings.Repeat("x", lambdaruntime.MaxResponseBytes), nil // over the limit once quoted
	case "slow":
		fmt.Fprintln(os.Stderr, "slow: started")
		time.Sleep(time.Second)
		return map[string]any{"statusCode": 200, "body": "slow: done"}, nil
	case "error":
		return nil, errors.New("it went wrong")
	case "panic":
		panic("it blew up")
	case "exit":
		os.Exit(3)
	case "hang":
		time.Sleep(time.Hour) // ignores its deadline
	case "context":
		lc, _ := lambdacontext.FromContext(ctx)
		deadline, _ := ctx.Deadline()
		return map[string]any{
			"request_id": lc.AwsRequestID, "arn": lc.InvokedFunctionArn, "deadline_ms": deadline.UnixMilli(),
			"trace": ctx.Value("x-amzn-trace-id"), "name": lambdacontext.FunctionName, "memory": lambdacontext.MemoryLimitInMB,
			"version": lambdacontext.FunctionVersion, "region": os.Getenv("AWS_REGION"), "task_root": os.Getenv("LAMBDA_TASK_ROOT"),
			"handler": os.Getenv("_HANDLER"), "own": os.Getenv("OWN_SETTING"), "pid": os.Getpid(),
		}, nil
	case "probe":
		// Calls the harness cannot accept while this invocation is held.
		api := "http://" + os.Getenv("AWS_LAMBDA_RUNTIME_API") + "/2018-06-01/runtime/"
		codes := map[string]int{}
		for name, path := range map[string]string{"wrong_id": "invocation/not-this-one/response", "late_init_error": "init/error"} {
			resp, err := http.Post(api+path, "application/json", strings.NewReader(`{}`))
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			codes[name] = resp.StatusCode
		}
		return codes, nil
	}
	return map[string]any{"echo": e.Do, "pid": os.Getpid()}, nil
}

func newFunction(t *testing.T, mode string, timeout time.Duration) *lambdaruntime.Function {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var logs lambdaruntime.LogBuffer
	f := &lambdaruntime.Function{
		Name: "fake", Binary: self, Timeout: timeout, MemoryMB: 256, Region: "eu-west-1",
		Env: map[string]string{"FAKE_RUNTIME": mode, "OWN_SETTING": "mine"}, Logs: &logs,
	}
	t.Cleanup(func() {
		f.Close()
		if t.Failed() {
			t.Logf("the function's log:\n%s", logs.String())
		}
	})
	return f
}

func invoke(t *testing.T, f *lambdaruntime.Function, do string, deadline time.Time) (map[string]any, *lambdaruntime.FunctionError) {
	t.Helper()
	out, ferr, err := f.Invoke(t.Context(), []byte(`{"do":"`+do+`"}`), deadline)
	if err != nil {
		t.Fatalf("invoke %s: %v", do, err)
	}
	if ferr != nil {
		return nil, ferr
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("invoke %s: answer %s: %v", do, out, err)
	}
	return v, nil
}

// TestContext: the runtime gets the request id, deadline, ARN and trace headers, and the
// environment Lambda sets beside the function's own; an environment serves invocation after
// invocation.
func TestContext(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 10*time.Second)
	deadline := time.Now().Add(7 * time.Second).Truncate(time.Millisecond)
	v, ferr := invoke(t, f, "context", deadline)
	if ferr != nil {
		t.Fatal(ferr)
	}
	want := map[string]any{
		"arn": "arn:aws:lambda:eu-west-1:123456789012:function:fake", "deadline_ms": float64(deadline.UnixMilli()),
		"name": "fake", "memory": float64(256), "version": "$LATEST", "region": "eu-west-1", "handler": "bootstrap", "own": "mine",
	}
	for k, w := range want {
		if v[k] != w {
			t.Errorf("%s: %v, want %v", k, v[k], w)
		}
	}
	if id, _ := v["request_id"].(string); len(id) != 36 {
		t.Errorf("request id %q, want a UUID", id)
	}
	if tr, _ := v["trace"].(string); !strings.HasPrefix(tr, "Root=1-") {
		t.Errorf("trace id %q", tr)
	}
	again, _ := invoke(t, f, "context", time.Time{})
	if again["pid"] != v["pid"] || again["request_id"] == v["request_id"] || f.Starts() != 1 {
		t.Errorf("a second invocation: pid %v (was %v), request id %v (was %v), %d starts; want the same process, a new id",
			again["pid"], v["pid"], again["request_id"], v["request_id"], f.Starts())
	}
}

// TestHandlerError: an error the handler returns is posted to /error and reported as the
// function's error; the environment serves the next invocation.
func TestHandlerError(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 5*time.Second)
	first, _ := invoke(t, f, "echo", time.Time{})
	_, ferr := invoke(t, f, "error", time.Time{})
	if ferr == nil || ferr.Message != "it went wrong" || ferr.Type != "errorString" {
		t.Fatalf("function error %+v, want errorString: it went wrong", ferr)
	}
	if !json.Valid(ferr.Payload) || !strings.Contains(string(ferr.Payload), `"errorType":"errorString"`) {
		t.Errorf("payload %s, want the runtime's error JSON", ferr.Payload)
	}
	after, _ := invoke(t, f, "echo", time.Time{})
	if after["pid"] != first["pid"] {
		t.Errorf("a handled error restarted the environment")
	}
}

// TestPanic: a panic is posted to /error with its stack, the runtime exits, and the next
// invocation gets a fresh environment.
func TestPanic(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 5*time.Second)
	first, _ := invoke(t, f, "echo", time.Time{})
	_, ferr := invoke(t, f, "panic", time.Time{})
	if ferr == nil || ferr.Message != "it blew up" || ferr.Type != "string" || len(ferr.StackTrace) < 3 {
		t.Fatalf("function error %+v, want the panic's message, type and stack", ferr)
	}
	after, ferr := invoke(t, f, "echo", time.Time{})
	if ferr != nil || after["pid"] == first["pid"] || f.Starts() != 2 {
		t.Errorf("after a panic: %v, %v, %d starts; want a fresh environment", after, ferr, f.Starts())
	}
}

// TestTimeout: an invocation past its deadline is reported as a timeout, its environment is
// killed, and the next invocation works in a fresh one.
func TestTimeout(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 5*time.Second)
	first, _ := invoke(t, f, "echo", time.Time{})
	_, ferr := invoke(t, f, "hang", time.Now().Add(500*time.Millisecond))
	if ferr == nil || !ferr.Timeout() || !strings.Contains(ferr.Message, "Task timed out") {
		t.Fatalf("function error %+v, want a timeout", ferr)
	}
	after, ferr := invoke(t, f, "echo", time.Time{})
	if ferr != nil || after["pid"] == first["pid"] {
		t.Errorf("after a timeout: %v, %v; want a fresh environment", after, ferr)
	}
}

// TestExit: a process that exits during an invocation fails it with Runtime.ExitError; one that
// exits before it asks for an event fails the invocation that started it; one that posts an
// init error fails it with that error.
func TestExit(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 5*time.Second)
	if _, ferr := invoke(t, f, "exit", time.Time{}); ferr == nil || !ferr.Exited() || !strings.Contains(ferr.Message, "exit status 3") {
		t.Errorf("exit mid-invocation: %+v, want Runtime.ExitError naming exit status 3", ferr)
	}
	if v, ferr := invoke(t, f, "echo", time.Time{}); ferr != nil || v["echo"] != "echo" {
		t.Errorf("after an exit: %v, %v", v, ferr)
	}

	crash := newFunction(t, "crash", 5*time.Second)
	if _, ferr := invoke(t, crash, "echo", time.Time{}); ferr == nil || !ferr.Exited() || !strings.Contains(ferr.Message, "exit status 2") {
		t.Errorf("crash at init: %+v, want Runtime.ExitError", ferr)
	}
	initErr := newFunction(t, "init-error", 5*time.Second)
	if _, ferr := invoke(t, initErr, "echo", time.Time{}); ferr == nil || ferr.Type != "Config.Missing" || ferr.Message != "no config" {
		t.Errorf("init error: %+v, want what the runtime posted", ferr)
	}
	if _, ferr := invoke(t, initErr, "echo", time.Time{}); ferr == nil || initErr.Starts() != 2 {
		t.Errorf("init error again: %+v after %d starts; each invocation tries a fresh init", ferr, initErr.Starts())
	}
}

// TestProtocolRefusals: a response for another request id is refused (400), as is an init
// error once the runtime has asked for an event (403).
func TestProtocolRefusals(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 5*time.Second)
	v, ferr := invoke(t, f, "probe", time.Time{})
	if ferr != nil || v["wrong_id"] != float64(400) || v["late_init_error"] != float64(403) {
		t.Errorf("refusals: %v, %v; want 400 and 403", v, ferr)
	}
}

// TestConcurrent: invocations at once get environments of their own, up to MaxEnvironments.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 10*time.Second)
	f.MaxEnvironments = 2
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			if _, ferr, err := f.Invoke(t.Context(), []byte(`{"do":"echo"}`), time.Time{}); err != nil || ferr != nil {
				t.Errorf("invoke: %v, %v", err, ferr)
			}
		})
	}
	wg.Wait()
	if n := f.Starts(); n < 1 || n > 2 {
		t.Errorf("%d environments started, want at most 2", n)
	}
}

// TestInvokeServer: the AWS SDK's Invoke reaches the function through the Invoke API, function
// errors come back as Lambda reports them, and an unknown function is not found.
func TestInvokeServer(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 5*time.Second)
	s := lambdaruntime.NewInvokeServer()
	defer s.Close()
	s.Add(f)
	client := awslambda.New(awslambda.Options{
		Region: "eu-west-1", BaseEndpoint: aws.String(s.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := client.Invoke(ctx, &awslambda.InvokeInput{FunctionName: aws.String("fake"), Payload: []byte(`{"do":"hello"}`)})
	if err != nil || out.FunctionError != nil || !strings.Contains(string(out.Payload), `"echo":"hello"`) || out.StatusCode != 200 {
		t.Fatalf("invoke: %+v, %v", out, err)
	}
	out, err = client.Invoke(ctx, &awslambda.InvokeInput{FunctionName: aws.String(f.ARN() + ":$LATEST"), Payload: []byte(`{"do":"error"}`)})
	if err != nil || aws.ToString(out.FunctionError) != "Unhandled" || !strings.Contains(string(out.Payload), "it went wrong") {
		t.Fatalf("invoke a failing function: %+v, %v", out, err)
	}
	_, err = client.Invoke(ctx, &awslambda.InvokeInput{FunctionName: aws.String("nobody")})
	if nf := (*types.ResourceNotFoundException)(nil); !errors.As(err, &nf) {
		t.Errorf("invoke an unknown function: %v, want ResourceNotFoundException", err)
	}
	out, err = client.Invoke(ctx, &awslambda.InvokeInput{FunctionName: aws.String("fake"), InvocationType: types.InvocationTypeEvent, Payload: []byte(`{}`)})
	if err != nil || out.StatusCode != 202 {
		t.Errorf("an asynchronous invocation: %+v, %v; want 202", out, err)
	}
}

// TestAPIGateway: a request through the gateway reaches the function as a proxy event; a
// function that fails answers 500, one that runs out of its own time too.
func TestAPIGateway(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 2*time.Second)
	srv := httptest.NewServer(lambdaruntime.APIGateway{Function: f})
	defer srv.Close()
	// The fake decodes {"do":...} from the proxy event, which has no such field: it echoes "",
	// a 200 response that is not a proxy response, which the gateway answers as a failure.
	resp, err := http.Post(srv.URL+"/v1/anything?x=1", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("an answer that is not a proxy response: %d, want 500", resp.StatusCode)
	}
	// A function that runs out of its own time fails: 500, as any function error.
	resp, err = http.Post(srv.URL+"/v1/anything", "application/json", strings.NewReader(`{"do":"hang"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("a function past its own timeout: %d, want 500", resp.StatusCode)
	}
	req := lambdaruntime.ProxyRequest(httptest.NewRequest(http.MethodGet, "/v1/lambdas?limit=5", nil), nil)
	if req.Path != "/v1/lambdas" || req.HTTPMethod != "GET" || req.QueryStringParameters["limit"] != "5" || req.RequestContext.RequestID == "" {
		t.Errorf("proxy request %+v", req)
	}
}

// TestAPIGatewayIntegrationTimeout: a function that outlives the integration's timeout answers
// the client 503 {"message":"Service Unavailable"}, as API Gateway does, while the function's
// own timeout is longer.
func TestAPIGatewayIntegrationTimeout(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 10*time.Second)
	srv := httptest.NewServer(lambdaruntime.APIGateway{Function: f, Timeout: time.Second})
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/anything", "application/json", strings.NewReader(`{"do":"hang"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || body.String() != `{"message":"Service Unavailable"}` {
		t.Errorf("past the integration's timeout: %d %s, want 503 {\"message\":\"Service Unavailable\"}", resp.StatusCode, body.String())
	}
}

// TestAPIGatewayClientGone: a client that disconnects does not end the invocation: the function
// finishes in the same environment, which serves the next invocation.
func TestAPIGatewayClientGone(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 10*time.Second)
	f.MaxEnvironments = 1 // the next invocation waits for the one the client left
	first, ferr := invoke(t, f, "echo", time.Time{})
	if ferr != nil {
		t.Fatal(ferr)
	}
	srv := httptest.NewServer(lambdaruntime.APIGateway{Function: f})
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/anything", strings.NewReader(`{"do":"slow"}`))
	gone := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	logs := f.Logs.(*lambdaruntime.LogBuffer)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "slow: started"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow invocation did not start within 10 s")
		}
	}
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client's request: %v, want it cancelled", err)
	}
	after, ferr := invoke(t, f, "echo", time.Time{})
	if ferr != nil || after["pid"] != first["pid"] || f.Starts() != 1 {
		t.Errorf("after the client went away: %v, %v, %d starts; want the same environment (pid %v), not killed", after, ferr, f.Starts(), first["pid"])
	}
}

// TestResponseTooLarge: the Runtime API answers a response over 6 MB with 413, which the runtime
// reports (aws-lambda-go then exits); the invocation fails with Function.ResponseSizeTooLarge.
func TestResponseTooLarge(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 10*time.Second)
	_, ferr := invoke(t, f, "big", time.Time{})
	if ferr == nil || ferr.Type != lambdaruntime.ErrorTypeTooLarge {
		t.Fatalf("a response over 6 MB: %+v, want %s", ferr, lambdaruntime.ErrorTypeTooLarge)
	}
	logs := f.Logs.(*lambdaruntime.LogBuffer)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "unexpected status code: 413"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the runtime did not report a 413 from the Runtime API within 10 s; its log:\n%s", logs.String())
		}
	}
}

// TestMatchRoute: the route an HTTP API selects, as the stack's route keys give them.
func TestMatchRoute(t *testing.T) {
	t.Parallel()
	routes := []string{
		"GET /v1/lambdas", "GET /v1/lambdas/{lambda}/tasks/{id}", "POST /v1/lambdas/{lambda}/tasks/{id}/cancel",
		"POST /v1/lambdas/{lambda}/tasks/cancel", "POST /v1/lambdas/{lambda}/tasks/batch", "ANY /files/{path+}", "GET /files/{path+}",
	}
	for _, tc := range []struct {
		method, path, key string
		params            map[string]string
	}{
		{"GET", "/v1/lambdas", "GET /v1/lambdas", nil},
		{"GET", "/v1/lambdas/echo/tasks/t%2F1", "GET /v1/lambdas/{lambda}/tasks/{id}", map[string]string{"lambda": "echo", "id": "t/1"}},
		{"POST", "/v1/lambdas/echo/tasks/cancel", "POST /v1/lambdas/{lambda}/tasks/cancel", map[string]string{"lambda": "echo"}},
		{"POST", "/v1/lambdas/echo/tasks/t1/cancel", "POST /v1/lambdas/{lambda}/tasks/{id}/cancel", map[string]string{"lambda": "echo", "id": "t1"}},
		{"GET", "/files/a/b", "GET /files/{path+}", map[string]string{"path": "a/b"}},
		{"PUT", "/files/a", "ANY /files/{path+}", map[string]string{"path": "a"}},
		{"DELETE", "/v1/lambdas", "", nil},
		{"GET", "/v1/lambdas/echo", "", nil},
		{"GET", "/files", "", nil},
	} {
		key, params, ok := lambdaruntime.MatchRoute(routes, tc.method, tc.path)
		if key != tc.key || ok != (tc.key != "") || len(params) != len(tc.params) {
			t.Errorf("%s %s: %q %v %v, want %q %v", tc.method, tc.path, key, params, ok, tc.key, tc.params)
			continue
		}
		for k, v := range tc.params {
			if params[k] != v {
				t.Errorf("%s %s: parameter %s = %q, want %q", tc.method, tc.path, k, params[k], v)
			}
		}
	}
	if key, _, ok := lambdaruntime.MatchRoute(append(routes, "$default"), "GET", "/nope"); !ok || key != "$default" {
		t.Errorf("a path no route matches, with $default: %q %v", key, ok)
	}
}

// TestAPIGatewayRoutes: with the HTTP API's routes, a request none matches is answered 404
// without reaching the function; one that does reaches it with the route's resource and path
// parameters.
func TestAPIGatewayRoutes(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 5*time.Second)
	srv := httptest.NewServer(lambdaruntime.APIGateway{Function: f, Routes: []string{"POST /v1/lambdas/{lambda}/tasks"}})
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/nothing/here", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || body.String() != `{"message":"Not Found"}` || f.Starts() != 0 {
		t.Errorf("no route: %d %s, %d starts; want 404 {\"message\":\"Not Found\"}, the function not invoked", resp.StatusCode, body.String(), f.Starts())
	}
	resp, err = http.Post(srv.URL+"/v1/lambdas/echo/tasks", "application/json", strings.NewReader(`{"do":"proxy"}`))
	if err != nil {
		t.Fatal(err)
	}
	body.Reset()
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || body.String() != `/v1/lambdas/{lambda}/tasks lambda=echo` {
		t.Errorf("a route: %d %s; want 200 with the route's resource and path parameters", resp.StatusCode, body.String())
	}
}
