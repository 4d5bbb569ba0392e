// Package lambdaruntime runs AWS Lambda function binaries (a custom runtime's bootstrap, such as
// the ones `make build` produces from functions/) as child processes under a test server that
// speaks the documented Lambda Runtime API, version 2018-06-01
// (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html):
//
//	GET  /2018-06-01/runtime/invocation/next          the next event, with the request id,
//	                                                  deadline, function ARN and trace headers
//	POST /2018-06-01/runtime/invocation/{id}/response the invocation's answer: 202
//	POST /2018-06-01/runtime/invocation/{id}/error    the invocation failed: 202; the body is
//	                                                  {errorMessage, errorType, stackTrace}
//	POST /2018-06-01/runtime/init/error               the runtime could not start: 202
//
// A Function is one function: its binary and the environment its configuration gives it. Invoke
// runs one invocation in an execution environment (a process and its Runtime API endpoint),
// starting one as Lambda does on a cold start, and keeps it for the next invocations. It models
// what Lambda does when things go wrong:
//
//   - the deadline passes: the environment is killed and the invocation fails with
//     Sandbox.Timedout; the next invocation starts a fresh one;
//   - the process exits or crashes during an invocation, or before it asked for its first event:
//     the invocation fails with Runtime.ExitError (or with what the runtime posted to
//     /init/error); the next invocation starts a fresh one;
//   - the runtime posts an error (a Go handler's error, or a panic, after which aws-lambda-go
//     exits): the invocation fails with that error, as Lambda's Invoke answers it.
//
// InvokeServer serves the Lambda Invoke API for Functions, so that a function calling another
// through the AWS SDK (AWS_ENDPOINT_URL_LAMBDA) reaches the other's real binary. APIGateway
// turns HTTP requests into the proxy events API Gateway sends.
//
// What it does not model: extensions, the Telemetry and Logs APIs, response streaming,
// SnapStart, provisioned concurrency, memory limits, reserved concurrency and throttles (at most
// MaxEnvironments environments run at once and further invocations wait), the init phase's own
// 10-second limit (init counts against the invocation's deadline here), and Lambda's freezing of
// an idle environment (the process keeps running between invocations).
package lambdaruntime

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The Runtime API's version and headers.
const (
	APIVersion = "2018-06-01"

	HeaderRequestID          = "Lambda-Runtime-Aws-Request-Id"
	HeaderDeadlineMs         = "Lambda-Runtime-Deadline-Ms"
	HeaderInvokedFunctionArn = "Lambda-Runtime-Invoked-Function-Arn"
	HeaderTraceID            = "Lambda-Runtime-Trace-Id"
	HeaderFunctionErrorType  = "Lambda-Runtime-Function-Error-Type"
	// HeaderFunctionErrorBody is a trailer aws-lambda-go sends, base64, when reading a
	// response's body fails midway.
	HeaderFunctionErrorBody = "Lambda-Runtime-Function-Error-Body"
)

// Error types of failures the harness reports itself, as Lambda names them.
const (
	ErrorTypeTimeout      = "Sandbox.Timedout"
	ErrorTypeExit         = "Runtime.ExitError"
	ErrorTypeTooLarge     = "Function.ResponseSizeTooLarge"
	ErrorTypeInvalidReqID = "InvalidRequestID"
)

// MaxResponseBytes is Lambda's limit on a synchronous invocation's response (6 MB).
const MaxResponseBytes = 6 << 20

// Defaults of Function.
const (
	DefaultTimeout         = 3 * time.Second // Lambda's default function timeout
	DefaultMemoryMB        = 128
	DefaultRegion          = "us-east-1"
	DefaultMaxEnvironments = 4
	// account is the account id in the ARNs the harness makes up.
	account = "123456789012"
)

// FunctionError is an invocation's failure as Lambda's Invoke answers it: the payload
// {errorMessage, errorType, stackTrace}, with the X-Amz-Function-Error header set.
type FunctionError struct {
	Message    string          `json:"errorMessage"`
	Type       string          `json:"errorType"`
	StackTrace json.RawMessage `json:"stackTrace,omitempty"`
	// Payload is the body Lambda's Invoke answers: what the runtime posted to /error, or the
	// JSON of the fields above for a failure the harness reports itself.
	Payload []byte `json:"-"`
	// HeaderType is the Lambda-Runtime-Function-Error-Type the runtime sent, if any.
	HeaderType string `json:"-"`
}

func (e *FunctionError) Error() string { return e.Type + ": " + e.Message }

// Timeout reports whether the invocation ran out of time.
func (e *FunctionError) Timeout() bool { return e.Type == ErrorTypeTimeout }

// Exited reports whether the runtime's process ended without an answer.
func (e *FunctionError) Exited() bool { return e.Type == ErrorTypeExit }

func ownError(typ, msg string) *FunctionError {
	e := &FunctionError{Type: typ, Message: msg}
	e.Payload, _ = json.Marshal(e)
	return e
}

// Function is a Lambda function whose binary the harness runs. Set its fields before the first
// Invoke and do not change them after; Close it when done.
type Function struct {
	Name   string // the function's name [the binary's file name]
	Binary string // the bootstrap binary
	// Env is the function's own environment, as its configuration sets it, with what the test
	// adds (endpoints, credentials: see EnvFromOS). The harness adds the variables Lambda
	// reserves: AWS_LAMBDA_RUNTIME_API, AWS_LAMBDA_FUNCTION_NAME and the like.
	Env      map[string]string
	Timeout  time.Duration // the function's timeout: the deadline of an Invoke given none [DefaultTimeout]
	MemoryMB int           // AWS_LAMBDA_FUNCTION_MEMORY_SIZE [DefaultMemoryMB]
	Region   string        // AWS_REGION [Env's AWS_REGION, else DefaultRegion]
	Handler  string        // _HANDLER ["bootstrap"]
	// MaxEnvironments is how many execution environments may run at once; an Invoke beyond
	// them waits for one to be free [DefaultMaxEnvironments].
	MaxEnvironments int
	// Logs receives the processes' stdout and stderr (CloudWatch's log stream); nil discards.
	// It is written from several goroutines: Logs serializes the writes.
	Logs io.Writer

	once   sync.Once
	slots  chan struct{} // one per environment that may run
	mu     sync.Mutex
	idle   []*environment
	all    map[*environment]bool
	closed bool
	starts int // environments started, for the log stream names
	logMu  sync.Mutex
}

// ARN is the function's ARN in the made-up account and its region.
func (f *Function) ARN() string {
	return "arn:aws:lambda:" + f.region() + ":" + account + ":function:" + f.name()
}

func (f *Function) name() string { return cmp.Or(f.Name, filepath.Base(f.Binary)) }

func (f *Function) region() string { return cmp.Or(f.Region, f.Env["AWS_REGION"], DefaultRegion) }

func (f *Function) timeout() time.Duration { return cmp.Or(f.Timeout, DefaultTimeout) }

func (f *Function) init() {
	f.once.Do(func() {
		f.slots = make(chan struct{}, cmp.Or(f.MaxEnvironments, DefaultMaxEnvironments))
		f.all = map[*environment]bool{}
	})
}

// Starts is how many execution environments (cold starts) the function has had.
func (f *Function) Starts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts
}

// Invoke runs one invocation of payload, which must end by deadline (the function's timeout
// from now if zero), and returns the function's response, or how it failed as Lambda's Invoke
// reports it. The error is for the harness's own failures and for ctx ending first; the
// environment of an invocation whose caller gave up is killed, as its answer has nowhere to go.
func (f *Function) Invoke(ctx context.Context, payload []byte, deadline time.Time) ([]byte, *FunctionError, error) {
	f.init()
	if deadline.IsZero() {
		deadline = time.Now().Add(f.timeout())
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	select {
	case f.slots <- struct{}{}:
	case <-dctx.Done():
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, ownError(ErrorTypeTimeout, "no execution environment was free before the deadline"), nil
	}
	defer func() { <-f.slots }()

	inv := &invocation{
		id: newRequestID(), payload: payload, deadline: deadline,
		arn: f.ARN(), traceID: newTraceID(), done: make(chan answer, 1),
	}
	for {
		env, err := f.take()
		if err != nil {
			return nil, nil, err
		}
		out, ferr, retry, err := env.run(ctx, inv)
		if retry { // an environment that ended between invocations: Lambda starts another
			f.discard(env)
			continue
		}
		if err != nil || ferr != nil && (ferr.Timeout() || ferr.Exited() || env.dead()) {
			f.discard(env)
		} else {
			f.release(env)
		}
		return out, ferr, err
	}
}

// take returns an idle environment, or starts one.
func (f *Function) take() (*environment, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errors.New("lambdaruntime: function " + f.name() + " is closed")
	}
	for len(f.idle) > 0 {
		env := f.idle[len(f.idle)-1]
		f.idle = f.idle[:len(f.idle)-1]
		if !env.dead() {
			f.mu.Unlock()
			return env, nil
		}
		delete(f.all, env)
		env.close()
	}
	f.starts++
	n := f.starts
	f.mu.Unlock()
	env, err := startEnvironment(f, n)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		env.close()
		return nil, errors.New("lambdaruntime: function " + f.name() + " is closed")
	}
	f.all[env] = true
	return env, nil
}

func (f *Function) release(env *environment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.idle = append(f.idle, env)
}

func (f *Function) discard(env *environment) {
	env.close()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.all, env)
}

// Close kills every environment of the function and waits for them to end.
func (f *Function) Close() error {
	f.init()
	f.mu.Lock()
	f.closed = true
	envs := slices.Collect(maps.Keys(f.all))
	f.all, f.idle = map[*environment]bool{}, nil
	f.mu.Unlock()
	for _, env := range envs {
		env.close()
	}
	return nil
}

// EnvFromOS returns the variables of the test's own environment that a function run on
// emulators needs: AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_*, credentials and region.
func EnvFromOS() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL":
			env[k] = v
		default:
			if strings.HasPrefix(k, "AWS_ENDPOINT_URL_") {
				env[k] = v
			}
		}
	}
	return env
}

// invocation is one event on its way through an environment.
type invocation struct {
	id, arn, traceID string
	payload          []byte
	deadline         time.Time
	done             chan answer // the first answer wins; buffered 1
	once             sync.Once
}

type answer struct {
	response []byte
	err      *FunctionError
}

func (inv *invocation) answer(a answer) bool {
	first := false
	inv.once.Do(func() { inv.done <- a; first = true })
	return first
}

// environment is one execution environment: a process and the Runtime API endpoint it talks to.
type environment struct {
	f    *Function
	srv  *httptest.Server
	cmd  *exec.Cmd
	next chan *invocation // Invoke hands the event to the runtime's GET /next
	// exited is closed once the process has ended; exitErr says how.
	exited  chan struct{}
	exitErr error
	// initFailed is closed when the runtime posts /init/error; initErr is what it posted.
	initFailed chan struct{}
	initErr    *FunctionError
	stopping   chan struct{} // closed by close: blocked handlers return
	closeOnce  sync.Once

	mu      sync.Mutex
	current *invocation // the invocation the runtime holds, between /next and its answer
	asked   bool        // the runtime has called /next at least once: its init is over
}

func startEnvironment(f *Function, n int) (*environment, error) {
	env := &environment{
		f: f, next: make(chan *invocation), exited: make(chan struct{}),
		initFailed: make(chan struct{}), stopping: make(chan struct{}),
	}
	env.srv = httptest.NewServer(env.routes())
	root := filepath.Dir(f.Binary)
	vars := map[string]string{
		// Lambda's own, for an OS-only runtime.
		"PATH": "/usr/local/bin:/usr/bin:/bin:/opt/bin", "LANG": "en_US.UTF-8", "TZ": ":UTC",
		"LAMBDA_TASK_ROOT": root, "LAMBDA_RUNTIME_DIR": root, "_HANDLER": cmp.Or(f.Handler, "bootstrap"),
		"AWS_LAMBDA_FUNCTION_NAME":        f.name(),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(cmp.Or(f.MemoryMB, DefaultMemoryMB)),
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + f.name(),
		"AWS_LAMBDA_LOG_STREAM_NAME":      time.Now().UTC().Format("2006/01/02") + "/[$LATEST]" + strconv.Itoa(n),
		"AWS_LAMBDA_INITIALIZATION_TYPE":  "on-demand",
	}
	maps.Copy(vars, f.Env)
	// What Lambda reserves wins over the function's configuration.
	vars["AWS_LAMBDA_RUNTIME_API"] = env.srv.Listener.Addr().String()
	vars["AWS_REGION"] = f.region()
	vars["AWS_DEFAULT_REGION"] = f.region()
	env.cmd = exec.Command(f.Binary)
	env.cmd.Dir = root
	env.cmd.Env = nil
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env.cmd.Env = append(env.cmd.Env, k+"="+vars[k])
	}
	out := io.Discard
	if f.Logs != nil {
		out = f.Logs
	}
	logs := &lockedWriter{mu: &f.logMu, w: out}
	env.cmd.Stdout, env.cmd.Stderr = logs, logs
	// A process group of its own, so that a kill ends whatever it started too.
	env.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := env.cmd.Start(); err != nil {
		env.srv.Close()
		return nil, fmt.Errorf("lambdaruntime: start %s: %w", f.Binary, err)
	}
	go func() {
		env.exitErr = env.cmd.Wait()
		close(env.exited)
	}()
	return env, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (env *environment) dead() bool {
	select {
	case <-env.exited:
		return true
	case <-env.initFailed:
		return true
	default:
		return false
	}
}

// close kills the process, waits for it to end, and stops the endpoint.
func (env *environment) close() {
	env.closeOnce.Do(func() {
		close(env.stopping)
		if env.cmd.Process != nil {
			_ = syscall.Kill(-env.cmd.Process.Pid, syscall.SIGKILL)
		}
		select {
		case <-env.exited:
		case <-time.After(10 * time.Second): // a kill is not refused; this is a backstop
		}
		env.srv.Close()
	})
}

// run hands inv to the runtime and waits for its answer. retry: the environment ended before it
// took the event, after serving earlier ones; another should take it.
func (env *environment) run(ctx context.Context, inv *invocation) (out []byte, ferr *FunctionError, retry bool, err error) {
	expired := time.NewTimer(time.Until(inv.deadline))
	defer expired.Stop()
	timedOut := func() *FunctionError {
		env.close()
		return ownError(ErrorTypeTimeout, fmt.Sprintf("RequestId: %s Error: Task timed out after %.2f seconds", inv.id, env.f.timeout().Seconds()))
	}
	env.mu.Lock()
	fresh := !env.asked
	env.mu.Unlock()
	select {
	case env.next <- inv:
	case <-env.exited:
		if !fresh {
			return nil, nil, true, nil
		}
		return nil, env.exitError(inv, "init"), false, nil
	case <-env.initFailed:
		env.close()
		return nil, env.initErr, false, nil
	case <-expired.C:
		return nil, timedOut(), false, nil
	case <-ctx.Done():
		env.close()
		return nil, nil, false, ctx.Err()
	}
	// The first answer wins: a response or error the runtime posted before it exited is it.
	select {
	case a := <-inv.done:
		return a.response, a.err, false, nil
	default:
	}
	select {
	case a := <-inv.done:
		return a.response, a.err, false, nil
	case <-env.exited:
		select {
		case a := <-inv.done:
			return a.response, a.err, false, nil
		default:
		}
		return nil, env.exitError(inv, "invoke"), false, nil
	case <-expired.C:
		return nil, timedOut(), false, nil
	case <-ctx.Done():
		env.close()
		return nil, nil, false, ctx.Err()
	}
}

func (env *environment) exitError(inv *invocation, phase string) *FunctionError {
	how := "exit status 0"
	if env.exitErr != nil {
		how = env.exitErr.Error()
	}
	msg := fmt.Sprintf("RequestId: %s Error: Runtime exited with error: %s", inv.id, how)
	if phase == "init" {
		msg = fmt.Sprintf("RequestId: %s Error: Runtime exited before it asked for an event (init): %s", inv.id, how)
	}
	return ownError(ErrorTypeExit, msg)
}

// routes is the Runtime API.
func (env *environment) routes() http.Handler {
	mux := http.NewServeMux()
	base := "/" + APIVersion + "/runtime"
	mux.HandleFunc("GET "+base+"/invocation/next", env.serveNext)
	mux.HandleFunc("POST "+base+"/invocation/{id}/response", env.serveResponse)
	mux.HandleFunc("POST "+base+"/invocation/{id}/error", env.serveError)
	mux.HandleFunc("POST "+base+"/init/error", env.serveInitError)
	return mux
}

func (env *environment) serveNext(w http.ResponseWriter, r *http.Request) {
	env.mu.Lock()
	env.asked = true
	// A /next while an invocation is held ends it without an answer; Lambda reports the
	// invocation as failed with no response. aws-lambda-go never does this.
	if held := env.current; held != nil {
		env.current = nil
		held.answer(answer{err: ownError("Runtime.NoResponse", "RequestId: "+held.id+" Error: the runtime asked for the next event without answering this one")})
	}
	env.mu.Unlock()
	select {
	case inv := <-env.next:
		env.mu.Lock()
		env.current = inv
		env.mu.Unlock()
		h := w.Header()
		h.Set(HeaderRequestID, inv.id)
		h.Set(HeaderDeadlineMs, strconv.FormatInt(inv.deadline.UnixMilli(), 10))
		h.Set(HeaderInvokedFunctionArn, inv.arn)
		h.Set(HeaderTraceID, inv.traceID)
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(inv.payload)
	case <-r.Context().Done():
	case <-env.stopping:
	}
}

// held returns the invocation the runtime holds if id names it, and lets go of it.
func (env *environment) held(w http.ResponseWriter, id string) *invocation {
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.current == nil || env.current.id != id {
		writeAPIError(w, http.StatusBadRequest, ErrorTypeInvalidReqID, "Invalid request ID: "+id)
		return nil
	}
	inv := env.current
	env.current = nil
	return inv
}

func (env *environment) serveResponse(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxResponseBytes+1))
	inv := env.held(w, r.PathValue("id"))
	if inv == nil {
		return
	}
	switch {
	case err != nil:
		writeAPIError(w, http.StatusBadRequest, "InvalidResponse", err.Error())
		inv.answer(answer{err: ownError("Runtime.InvalidResponse", err.Error())})
	case len(body) > MaxResponseBytes:
		// Read the rest (up to a bound) before answering, so that the runtime gets the 413
		// rather than a connection closed under the body it is still sending.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 4*MaxResponseBytes))
		writeAPIError(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", fmt.Sprintf("the response is over %d bytes", MaxResponseBytes))
		inv.answer(answer{err: ownError(ErrorTypeTooLarge, fmt.Sprintf("Response payload size exceeded maximum allowed payload size (%d bytes).", MaxResponseBytes))})
	case r.Trailer.Get(HeaderFunctionErrorType) != "":
		// aws-lambda-go failed reading its response midway and says so in trailers.
		ferr := &FunctionError{Type: r.Trailer.Get(HeaderFunctionErrorType), HeaderType: r.Trailer.Get(HeaderFunctionErrorType)}
		ferr.Payload, _ = base64.StdEncoding.DecodeString(r.Trailer.Get(HeaderFunctionErrorBody))
		_ = json.Unmarshal(ferr.Payload, ferr)
		accepted(w)
		inv.answer(answer{err: ferr})
	default:
		accepted(w)
		inv.answer(answer{response: body})
	}
}

func (env *environment) serveError(w http.ResponseWriter, r *http.Request) {
	ferr, ok := readFunctionError(w, r)
	if !ok {
		return
	}
	inv := env.held(w, r.PathValue("id"))
	if inv == nil {
		return
	}
	accepted(w)
	inv.answer(answer{err: ferr})
}

func (env *environment) serveInitError(w http.ResponseWriter, r *http.Request) {
	env.mu.Lock()
	asked := env.asked
	env.mu.Unlock()
	if asked {
		writeAPIError(w, http.StatusForbidden, "InvalidStateTransition", "the runtime's init is over: it has asked for an event")
		return
	}
	ferr, ok := readFunctionError(w, r)
	if !ok {
		return
	}
	env.mu.Lock()
	first := env.initErr == nil
	if first {
		env.initErr = ferr
	}
	env.mu.Unlock()
	accepted(w)
	if first {
		close(env.initFailed)
	}
}

// readFunctionError reads an error a runtime posts: {errorMessage, errorType, stackTrace}, and
// the error type header, which wins when the body has none.
func readFunctionError(w http.ResponseWriter, r *http.Request) (*FunctionError, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxResponseBytes+1))
	if err != nil || len(body) > MaxResponseBytes {
		writeAPIError(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "the error body is unreadable or too large")
		return nil, false
	}
	ferr := &FunctionError{Payload: body, HeaderType: r.Header.Get(HeaderFunctionErrorType)}
	if json.Unmarshal(body, ferr) != nil {
		ferr.Message = string(body) // Lambda passes a body that is not JSON on as it is
	}
	ferr.Type = cmp.Or(ferr.Type, ferr.HeaderType, "Unhandled")
	return ferr, true
}

func accepted(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"status":"OK"}` + "\n"))
}

func writeAPIError(w http.ResponseWriter, code int, typ, msg string) {
	body, _ := json.Marshal(map[string]string{"errorMessage": msg, "errorType": typ})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

// newRequestID is a UUID version 4, as Lambda's request ids are.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// newTraceID is an X-Ray trace header, as Lambda passes it.
func newTraceID() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("Root=1-%08x-%x;Parent=%x;Sampled=0", time.Now().Unix(), b[:12], b[12:])
}
