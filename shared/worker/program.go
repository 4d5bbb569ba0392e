package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/openatf/atf/shared/task"
)

// ExitRetry is the exit code (EX_TEMPFAIL) by which a program asks for another attempt. Exit 0
// is success; any other code is a fatal failure. A program that exits ExitRetry may say when to
// run again on stdout (LaterOutput).
const ExitRetry = 75

// LaterOutput is what a program that exits ExitRetry may print on stdout, alone, to say when to
// run again, a Go duration: {"snooze": "5m"} snoozes the task (Snooze: no attempt counted), and
// {"retry_after": "30s"} runs its next attempt then instead of after the backoff (RetryAfter,
// with the stderr tail as its error). Any other stdout of such a program is ignored, as before
// snoozes: its exit is a retriable failure.
type LaterOutput struct {
	Snooze     string `json:"snooze,omitempty"`
	RetryAfter string `json:"retry_after,omitempty"`
}

// Limits of what is kept of a program's output.
const (
	StderrTail   = 2 << 10 // the last bytes of stderr become the task's error
	MaxStdout    = 1 << 20 // a larger result is a fatal failure
	killWaitTime = 2 * time.Second
)

// Program runs an executable as a handler: the payload JSON on stdin, the result JSON on stdout,
// the task in ATF_* environment variables. A stdout that is not JSON becomes a JSON string.
// Its standard error is its attempt's log (LogOf), and the tail of it the error of a failure.
//
// A task that waited for upstreams gets an envelope on stdin instead of the bare payload, and
// ATF_ENVELOPE=1: {"payload": <the payload, or null>, "upstreams": [{"lambda", "id", "status",
// "result", "error"}, ...]}, the upstreams in the order of its after (see Envelope).
type Program struct {
	Path string
	// WithoutAWSCredentials leaves the variables that carry or locate AWS credentials
	// (CredentialVars) out of the program's environment. The ECS executor sets it: its task
	// role's credentials are for claiming and reporting, not for the lambda's handler.
	WithoutAWSCredentials bool
}

// CredentialVars are the environment variables through which the AWS SDKs find credentials:
// static keys, the container credentials endpoint (ECS, and its token), web identity, profiles.
var CredentialVars = []string{
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_CREDENTIAL_EXPIRATION",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
	"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
}

// environ is the environment the program starts with, before the task's ATF_* variables.
func (p Program) environ() []string {
	env := os.Environ()
	if !p.WithoutAWSCredentials {
		return env
	}
	return slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(CredentialVars, name)
	})
}

// startTries bounds the starts of a program whose file is busy (ETXTBSY), 10 ms apart and
// twice as long each time: 150 ms in all.
const startTries = 5

// Handle runs the program once. When ctx ends, its whole process group is killed (SIGKILL). A
// task cancelled while it runs (ctx's cause is a Cancellation) gets a gentler stop: SIGTERM to
// the group, then SIGKILL after the cancellation's grace if the program has not exited by then.
func (p Program) Handle(ctx context.Context, t Task) (json.RawMessage, error) {
	stdin := t.Payload
	env := append(p.environ(),
		"ATF_TASK_ID="+t.ID, "ATF_LAMBDA="+t.Lambda, "ATF_ATTEMPT="+strconv.Itoa(t.Attempt),
		"ATF_COLLECTION="+t.Collection, "ATF_PRIORITY="+t.Priority)
	if t.Inputs != nil {
		in, err := json.Marshal(Envelope{Payload: t.Payload, Upstreams: t.Inputs})
		if err != nil {
			return nil, Fatal(fmt.Errorf("encode the upstreams' results: %w", err))
		}
		stdin, env = in, append(env, "ATF_ENVELOPE=1")
	}
	var stdout limitedBuffer
	stdout.limit = MaxStdout
	stderr := tailBuffer{limit: StderrTail}
	var cmd *exec.Cmd
	for try := 0; ; try++ {
		cmd = exec.Command(p.Path)
		cmd.Stdin, cmd.Env = bytes.NewReader(stdin), env
		cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(&stderr, LogOf(ctx))
		cmd.SysProcAttr = procAttr()
		cmd.WaitDelay = killWaitTime
		err := cmd.Start()
		if err == nil {
			break
		}
		// "Text file busy": the program's file is open for writing somewhere, as for a moment
		// while it is replaced, or while another goroutine of this process forks. It passes.
		if !errors.Is(err, syscall.ETXTBSY) || try == startTries-1 || ctx.Err() != nil {
			return nil, Fatal(fmt.Errorf("start %s: %w", p.Path, err))
		}
		time.Sleep(time.Duration(10<<try) * time.Millisecond)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	select {
	case err = <-waited:
	case <-ctx.Done():
		if c := (Cancellation{}); errors.As(context.Cause(ctx), &c) {
			// How it exited does not matter: its task was cancelled.
			if exited, _ := terminate(cmd.Process.Pid, c.Grace, waited); exited {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // leftovers of the group, if any
				return nil, fmt.Errorf("stopped by SIGTERM: %w", context.Cause(ctx))
			}
		}
		// SIGKILL cannot be caught: the group runs no more once it is sent. Wait reaps it in the
		// background, since a pipe held by a process outside the group can keep it WaitDelay.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // fails only if the group is gone already
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("timed out, killed: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("stopped, killed: %w", context.Cause(ctx))
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // leftovers of a finished script, if any
	if stdout.over {
		return nil, Fatal(fmt.Errorf("result is over %d bytes", MaxStdout))
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return result(stdout.Bytes()), nil
	case errors.As(err, &exit) && exit.ExitCode() == ExitRetry:
		return nil, laterOf(stdout.Bytes(), errors.New(stderr.message(err)))
	default:
		return nil, Fatal(errors.New(stderr.message(err)))
	}
}

// laterOf is the error of a program that exited ExitRetry and printed out on stdout: the Later it
// asks for if out is a LaterOutput, else failure, a retriable failure.
func laterOf(out []byte, failure error) error {
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	var o LaterOutput
	if dec.Decode(&o) != nil || (o.Snooze == "") == (o.RetryAfter == "") {
		return failure
	}
	if _, err := dec.Token(); err != io.EOF {
		return failure // more than the one object
	}
	key, v := "snooze", o.Snooze
	if o.RetryAfter != "" {
		key, v = "retry_after", o.RetryAfter
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%w (the program printed %s %q, which is not a Go duration such as \"30s\")", failure, key, v)
	}
	if o.Snooze != "" {
		return Snooze(d)
	}
	return RetryAfter(d, failure)
}

// terminate sends SIGTERM to the process group of pid and reports whether the program exited
// (waited answered) within grace, and how.
func terminate(pid int, grace time.Duration, waited <-chan error) (exited bool, err error) {
	if grace <= 0 {
		return false, nil
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM) // fails only if the group is gone already
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-waited:
		return true, err
	case <-t.C:
		return false, nil
	}
}

// result is stdout as JSON: empty is no result, JSON is kept (compacted), other text is quoted.
func result(out []byte) json.RawMessage {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, out) == nil {
		return b.Bytes()
	}
	s, _ := json.Marshal(string(out))
	return s
}

type limitedBuffer struct {
	bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		b.over = true
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	buf   []byte
	limit int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.limit {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.limit:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) message(err error) string {
	if s := strings.TrimSpace(strings.ToValidUTF8(string(b.buf), "")); s != "" {
		return s
	}
	return err.Error()
}

// HandleDir registers a Program for every executable file in dir, named after the file without
// its extension ("send-email.sh" is lambda send-email), and returns the names.
func (m *Mux) HandleDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("handlers folder: %w", err)
	}
	var names []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || strings.HasPrefix(e.Name(), ".") || !info.Mode().IsRegular() || info.Mode()&0o111 == 0 {
			continue
		}
		name := strings.TrimSuffix(e.Name(), filepath.Ext(e.Name()))
		if err := task.ValidateName("lambda name", name); err != nil {
			return nil, fmt.Errorf("handler %s: %w", filepath.Join(dir, e.Name()), err)
		}
		if _, taken := m.Handler(name); taken {
			return nil, fmt.Errorf("handler %s: lambda %s is already registered", filepath.Join(dir, e.Name()), name)
		}
		path, err := filepath.Abs(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		m.Handle(name, Program{Path: path})
		names = append(names, name)
	}
	return names, nil
}

// Main runs h as a program handler: a Go worker built with it can be dropped in a handlers
// folder like any executable. It reads the payload from stdin and the task from ATF_* variables,
// writes the result to stdout, and exits 0, ExitRetry or 1.
//
// Standard output carries the result alone: while h runs, os.Stdout is standard error, so what
// h prints (fmt.Println, a command whose Stdout is os.Stdout) goes to its log with its slog and
// log output, not into its result.
func Main(h Handler) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	result := os.Stdout
	os.Stdout = os.Stderr
	code := serve(ctx, h, os.Stdin, result, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Envelope is what a program gets on stdin when its task waited for upstreams.
type Envelope struct {
	Payload   json.RawMessage `json:"payload"`
	Upstreams []task.Input    `json:"upstreams"`
}

func serve(ctx context.Context, h Handler, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	payload, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintln(stderr, "read payload:", err)
		return ExitRetry
	}
	attempt, _ := strconv.Atoi(getenv("ATF_ATTEMPT"))
	t := Task{
		ID: getenv("ATF_TASK_ID"), Lambda: getenv("ATF_LAMBDA"), Collection: getenv("ATF_COLLECTION"),
		Priority: getenv("ATF_PRIORITY"), Attempt: attempt, Payload: bytes.TrimSpace(payload),
	}
	if getenv("ATF_ENVELOPE") == "1" {
		var env Envelope
		if err := json.Unmarshal(payload, &env); err != nil {
			fmt.Fprintln(stderr, "read the envelope:", err)
			return 1
		}
		t.Payload, t.Inputs = env.Payload, env.Upstreams
		if t.Inputs == nil {
			t.Inputs = []task.Input{}
		}
		if string(t.Payload) == "null" {
			t.Payload = nil
		}
	}
	res, err := Run(ctx, h, t)
	switch {
	case err == nil:
		if _, err := stdout.Write(res); err != nil {
			// The result is lost: exiting 0 would record an empty one.
			fmt.Fprintln(stderr, "write result:", err)
			return ExitRetry
		}
		return 0
	case Retriable(err):
		fmt.Fprintln(stderr, err)
		if later, ok := LaterOf(err); ok {
			// As a program says it (LaterOutput): the process that runs this one reads it back.
			o := LaterOutput{Snooze: later.Delay.String()}
			if later.Counted {
				o = LaterOutput{RetryAfter: later.Delay.String()}
			}
			b, _ := json.Marshal(o)
			if _, err := stdout.Write(b); err != nil {
				fmt.Fprintln(stderr, "write when to run again:", err) // then retried after the backoff
			}
		}
		return ExitRetry
	default:
		fmt.Fprintln(stderr, err)
		return 1
	}
}
