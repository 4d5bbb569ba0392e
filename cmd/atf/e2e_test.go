package main

// End-to-end tests: the real atf binary, run as `atf dev` with shell-script lambdas, driven over
// HTTP. They are the acceptance scenarios of the core engine.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

var atfBin, examplesDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "atf-e2e")
	if err != nil {
		panic(err)
	}
	atfBin = filepath.Join(dir, "atf")
	if out, err := exec.Command("go", "build", "-o", atfBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build atf: %v\n%s", err, out)
		os.Exit(1)
	}
	examplesDir = filepath.Join(dir, "examples")
	for _, name := range []string{"echo", "sleep", "flaky", "join"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(examplesDir, name), "../../functions/workers/"+name).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build example %s: %v\n%s", name, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// scripts are the lambdas of the end-to-end runs.
var scripts = map[string]string{
	"echo.sh":  `cat`,
	"flaky.sh": `[ "$ATF_ATTEMPT" -lt 3 ] && { echo "attempt $ATF_ATTEMPT fails" >&2; exit 75; }; echo "{\"attempt\":$ATF_ATTEMPT}"`,
	"fail.sh":  `echo "line one of a long story" >&2; echo "permission denied: the real reason" >&2; exit 1`,
	"retry.sh": `echo "try later" >&2; exit 75`,
	// record appends its priority and id, one line per run, to the file named in its payload.
	"record.sh": `read -r p; f=$(echo "$p" | sed 's/.*"file":"\([^"]*\)".*/\1/'); echo "$ATF_PRIORITY $ATF_TASK_ID" >> "$f"; sleep 0.05; echo '{}'`,
	"slow.sh":   `sleep 1; echo '{"done":true}'`,
	"gated.sh":  `echo '{}'`,
	"logged.sh": `echo "processing $ATF_TASK_ID" >&2; echo '{"ok":true}'`,
}

func handlersDir(t *testing.T) string {
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type devProcess struct {
	cmd    *exec.Cmd
	client *client.Client
	done   chan struct{} // closed once it has exited and its stderr is read
	log    func() string // what it logged so far
	stdout *lockedBuffer // what it wrote to stdout (atf dev --events stdout)
	killed atomic.Bool   // the test SIGKILLed it (stop), as a fault of a chaos scenario
}

// lockedBuffer is a bytes.Buffer a process writes while a test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var upLine = regexp.MustCompile(`api=(http://\S+)`)

// A backend returns the atf dev flags of a store of its own for one test.
type backend func(t *testing.T) []string

// embedded is a new SQLite file.
func embedded(t *testing.T) []string { return []string{"--db", filepath.Join(t.TempDir(), "atf.db")} }

// onAWS is a new DynamoDB table and a new set of SQS queues on the endpoints of the environment,
// such as the emulators of `make emulators`; they are deleted when the test ends.
func onAWS(t *testing.T) []string {
	t.Helper()
	name := awstest.Name("atf-e2e")
	awstest.Cleanup(t, name) // atf dev --create makes them
	return []string{"--backend", "aws", "--create", "--table", name, "--queue-prefix", name, "--shards", "2", "--poll", "250ms"}
}

// startDev starts `atf dev` on a free port and waits until its API answers.
func startDev(t *testing.T, handlers string, store []string, extra ...string) *devProcess {
	t.Helper()
	args := slices.Concat([]string{"dev", "--addr", "127.0.0.1:0", "--handlers", handlers, "--heartbeat", "200ms"}, store, extra)
	cmd := exec.Command(atfBin, args...)
	stdout := &lockedBuffer{}
	cmd.Stdout = stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProcess{cmd: cmd, done: make(chan struct{}), stdout: stdout}
	endpoint := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	p.log = func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return log.String()
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := upLine.FindStringSubmatch(sc.Text()); m != nil {
				endpoint <- m[1]
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if t.Failed() && !p.killed.Load() {
			p.logTail(t)
		}
		p.stop(syscall.SIGKILL)
	})
	select {
	case ep := <-endpoint:
		p.client = &client.Client{Endpoint: ep}
	case <-p.done:
		t.Fatalf("%v before it came up", p.exited())
	case <-time.After(30 * time.Second):
		t.Fatal("atf dev did not come up")
	}
	return p
}

func (p *devProcess) stop(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		p.killed.Store(true)
	}
	p.cmd.Process.Signal(sig)
	<-p.done
}

// exited is an error saying how p ended, if it did; nil while it runs.
func (p *devProcess) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("atf dev (pid %d) exited: %s", p.cmd.Process.Pid, p.cmd.ProcessState)
	default:
		return nil
	}
}

// abandoned reports whether p has ended itself with executor.ExitAbandoned: a handler it stopped
// for a lost lease had not returned within half the lease margin, as on a starved machine, and
// it ended the process so that the handler could not overlap the task's next run. A chaos
// scenario takes it as one more crash. It waits up to wait for a process that may be ending, as
// when a call to its API failed.
func (p *devProcess) abandoned(wait time.Duration) bool {
	if p.exited() == nil {
		select {
		case <-p.done:
		case <-time.After(wait):
			return false
		}
	}
	return !p.killed.Load() && p.cmd.ProcessState.ExitCode() == executor.ExitAbandoned
}

// logTailLines is how much of an atf dev's log a failed test prints.
const logTailLines = 100

// logTail prints the end of p's log, a test log line each, so that `make chaos`'s filter of the
// output keeps it. A failed test prints it for every atf dev but those it killed as a fault of
// a chaos scenario: a long scenario starts hundreds.
func (p *devProcess) logTail(t *testing.T) {
	t.Helper()
	// One ending on its own (a test sees it as its API gone) is given a moment to, so that its
	// last words and its exit status show.
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
	}
	// A test that polls fills the log with its requests: show the rest, which says what went wrong.
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(p.log(), "\n"), "\n") {
		if !strings.Contains(l, "level=INFO msg=request ") || !strings.Contains(l, " status=200 ") {
			lines = append(lines, l)
		}
	}
	from := max(len(lines)-logTailLines, 0)
	state := "still running"
	if p.exited() != nil {
		state = p.cmd.ProcessState.String()
	}
	t.Logf("atf dev (pid %d, %s): the last %d lines of its log, less its successful requests:", p.cmd.Process.Pid, state, len(lines)-from)
	for _, l := range lines[from:] {
		t.Logf("atf dev %d| %s", p.cmd.Process.Pid, l)
	}
}

// waitStatus polls a task until it is terminal and returns it.
func waitTerminal(t *testing.T, c *client.Client, lambda, id string) task.Task {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tk, err := c.Get(context.Background(), lambda, id)
		if err != nil {
			t.Fatalf("get %s/%s: %v", lambda, id, err)
		}
		if tk.Status.Terminal() {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s/%s still %s", lambda, id, tk.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func schedule(t *testing.T, c *client.Client, lambda string, req client.ScheduleRequest) task.Task {
	t.Helper()
	tk, created, err := c.Schedule(context.Background(), lambda, req)
	if err != nil {
		t.Fatalf("schedule %s: %v", lambda, err)
	}
	if !created {
		t.Fatalf("schedule %s: not created", lambda)
	}
	return tk
}

func TestDev(t *testing.T) { testDev(t, embedded, true) }

// TestDevAWS runs the same scenarios on DynamoDB and SQS.
func TestDevAWS(t *testing.T) { testDev(t, onAWS, true) }

// TestDevFunctions runs them through the AWS function handlers, fed by local event sources. A
// worker function's queues feed it side by side, as event source mappings do on AWS, so its
// priorities are not strict there: the priority scenario checks only that every task runs.
func TestDevFunctions(t *testing.T) { testDev(t, onAWSFunctions, false) }

// onAWSFunctions is onAWS, running the function handlers.
func onAWSFunctions(t *testing.T) []string { return append(onAWS(t), "--functions") }

func testDev(t *testing.T, b backend, strictPriority bool) {
	dev := startDev(t, handlersDir(t), b(t), "--concurrency", "1")
	c := dev.client
	ctx := context.Background()

	t.Run("delay", func(t *testing.T) {
		t.Parallel()
		tk := schedule(t, c, "echo", client.ScheduleRequest{Payload: []byte(`{"n": 1}`), Delay: "2s"})
		done := waitTerminal(t, c, "echo", tk.ID)
		if done.Status != task.StatusSuccess || compact(done.Result) != `{"n":1}` {
			t.Fatalf("got %s with result %s", done.Status, done.Result)
		}
		if late := done.UpdatedAt.Sub(tk.RunAt); late < 0 || late > 3*time.Second {
			t.Fatalf("finished %s after run_at, want within 3s", late)
		}
	})
	t.Run("wait for a result", func(t *testing.T) {
		t.Parallel()
		tk := schedule(t, c, "echo", client.ScheduleRequest{Payload: []byte(`{"n": 2}`), Delay: "1s"})
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		done, err := c.Wait(wctx, "echo", tk.ID)
		if err != nil || done.Status != task.StatusSuccess || compact(done.Result) != `{"n":2}` {
			t.Fatalf("Wait: %s with result %s, %v", done.Status, done.Result, err)
		}
	})
	t.Run("retriable then success", func(t *testing.T) {
		t.Parallel()
		tk := schedule(t, c, "flaky", client.ScheduleRequest{})
		done := waitTerminal(t, c, "flaky", tk.ID)
		if done.Status != task.StatusSuccess || done.Attempts != 3 || compact(done.Result) != `{"attempt":3}` {
			t.Fatalf("got %s after %d attempts, result %s", done.Status, done.Attempts, done.Result)
		}
		// Its history: the two failures, each with its own error, then the success.
		h, err := c.Attempts(ctx, "flaky", tk.ID)
		if err != nil || len(h.Attempts) != 3 || h.Dropped != 0 {
			t.Fatalf("Attempts: %+v, %v; want 3 attempts", h, err)
		}
		for i, a := range h.Attempts {
			wantOutcome, wantErr := task.OutcomeRetriable, fmt.Sprintf("attempt %d fails", i+1)
			if i == 2 {
				wantOutcome, wantErr = task.OutcomeSuccess, ""
			}
			if a.Number != i+1 || a.Outcome != wantOutcome || !strings.Contains(a.Error, wantErr) || wantErr == "" && a.Error != "" ||
				a.Worker == "" || a.StartedAt.IsZero() || a.EndedAt.Before(a.StartedAt) || i > 0 && a.StartedAt.Before(h.Attempts[i-1].EndedAt) {
				t.Errorf("attempt %d: %+v; want number %d, outcome %s, error %q, a worker, and times in order", i, a, i+1, wantOutcome, wantErr)
			}
		}
	})
	t.Run("fatal", func(t *testing.T) {
		t.Parallel()
		tk := schedule(t, c, "fail", client.ScheduleRequest{})
		done := waitTerminal(t, c, "fail", tk.ID)
		if done.Status != task.StatusFatalFailure || !strings.Contains(done.Error, "permission denied: the real reason") || done.Attempts != 1 {
			t.Fatalf("got %s after %d attempts, error %q", done.Status, done.Attempts, done.Error)
		}
	})
	t.Run("dead", func(t *testing.T) {
		t.Parallel()
		tk := schedule(t, c, "retry", client.ScheduleRequest{MaxAttempts: 2})
		done := waitTerminal(t, c, "retry", tk.ID)
		if done.Status != task.StatusDead || done.Attempts != 2 || !strings.Contains(done.Error, "try later") {
			t.Fatalf("got %s after %d attempts, error %q", done.Status, done.Attempts, done.Error)
		}
	})
	t.Run("priority", func(t *testing.T) {
		t.Parallel()
		record := filepath.Join(t.TempDir(), "order")
		if _, err := c.SetGate(ctx, "record", "", task.GatePause); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := range 10 {
			for _, p := range []string{"low", "normal", "high"} {
				tk := schedule(t, c, "record", client.ScheduleRequest{
					ID: fmt.Sprintf("%s-%d", p, i), Priority: p, Payload: []byte(fmt.Sprintf(`{"file":%q}`, record)),
				})
				ids = append(ids, tk.ID)
			}
		}
		time.Sleep(300 * time.Millisecond) // a few sweeps: the paused tasks must stay new
		if tasks, _, err := c.List(ctx, task.ListParams{Lambda: "record", Status: task.StatusNew}); err != nil || len(tasks) != 30 {
			t.Fatalf("paused lambda: %d tasks new, want 30 (err %v)", len(tasks), err)
		}
		if _, err := c.SetGate(ctx, "record", "", task.GateOpen); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if done := waitTerminal(t, c, "record", id); done.Status != task.StatusSuccess {
				t.Fatalf("%s: %s %s", id, done.Status, done.Error)
			}
		}
		data, err := os.ReadFile(record)
		if err != nil {
			t.Fatal(err)
		}
		if !strictPriority {
			if runs := strings.Count(string(data), "\n"); runs != len(ids) {
				t.Fatalf("%d runs recorded, want %d", runs, len(ids))
			}
			return
		}
		var order []string
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			order = append(order, strings.Fields(line)[0])
		}
		want := slices.Concat(slices.Repeat([]string{"high"}, 10), slices.Repeat([]string{"normal"}, 10), slices.Repeat([]string{"low"}, 10))
		if !slices.Equal(order, want) {
			t.Fatalf("run order by priority:\n got %v\nwant %v", order, want)
		}
	})
	t.Run("gates", func(t *testing.T) {
		t.Parallel()
		// drop a collection: its waiting tasks end dropped as they come due; others are untouched
		if _, err := c.SetGate(ctx, "gated", "marketing", task.GateDrop); err != nil {
			t.Fatal(err)
		}
		dropMe := schedule(t, c, "gated", client.ScheduleRequest{Collection: "marketing"})
		keep := schedule(t, c, "gated", client.ScheduleRequest{Collection: "password-reset", Delay: "1h"})
		if done := waitTerminal(t, c, "gated", dropMe.ID); done.Status != task.StatusDropped {
			t.Fatalf("dropped collection: task is %s", done.Status)
		}
		if tk, _ := c.Get(ctx, "gated", keep.ID); tk.Status != task.StatusNew {
			t.Fatalf("other collection: task is %s, want new", tk.Status)
		}
		// pause the lambda: tasks wait; open: they run
		if _, err := c.SetGate(ctx, "gated", "", task.GatePause); err != nil {
			t.Fatal(err)
		}
		held := schedule(t, c, "gated", client.ScheduleRequest{Collection: "password-reset"})
		time.Sleep(300 * time.Millisecond)
		if tk, _ := c.Get(ctx, "gated", held.ID); tk.Status != task.StatusNew {
			t.Fatalf("paused: task is %s, want new", tk.Status)
		}
		if _, err := c.SetGate(ctx, "gated", "", task.GateOpen); err != nil {
			t.Fatal(err)
		}
		if done := waitTerminal(t, c, "gated", held.ID); done.Status != task.StatusSuccess {
			t.Fatalf("opened: task is %s", done.Status)
		}
		// drop the lambda: all its waiting tasks end dropped
		if _, err := c.SetGate(ctx, "gated", "", task.GateDrop); err != nil {
			t.Fatal(err)
		}
		if done := waitTerminal(t, c, "gated", keep.ID); done.Status != task.StatusDropped {
			t.Fatalf("dropped lambda: task is %s", done.Status)
		}
		later := schedule(t, c, "gated", client.ScheduleRequest{})
		if done := waitTerminal(t, c, "gated", later.ID); done.Status != task.StatusDropped {
			t.Fatalf("scheduled while dropping: task is %s", done.Status)
		}
	})
	t.Run("bad input", func(t *testing.T) { // not parallel: it runs alone, so any change is its own
		big := `{"payload":"` + strings.Repeat("x", task.DefaultPayloadLimit) + `"}`
		for _, tc := range []struct {
			name, path, body string
			status           int
		}{
			{"unknown lambda", "/v1/lambdas/nope/tasks", `{}`, 404},
			{"malformed json", "/v1/lambdas/echo/tasks", `{"payload":`, 400},
			{"unknown field", "/v1/lambdas/echo/tasks", `{"dealy":"1s"}`, 400},
			{"unknown priority", "/v1/lambdas/echo/tasks", `{"priority":"urgent"}`, 422},
			{"run_at and delay", "/v1/lambdas/echo/tasks", `{"run_at":"2030-01-01T00:00:00Z","delay":"1s"}`, 422},
			{"negative delay", "/v1/lambdas/echo/tasks", `{"delay":"-1s"}`, 422},
			{"bad delay", "/v1/lambdas/echo/tasks", `{"delay":"soon"}`, 422},
			{"bad run_at", "/v1/lambdas/echo/tasks", `{"run_at":"tomorrow"}`, 400},
			{"payload over the limit", "/v1/lambdas/echo/tasks", big, 413},
		} {
			before, _ := c.Lambdas(ctx)
			resp, err := http.Post(c.Endpoint+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !regexp.MustCompile(`"error":\s*\{\s*"code":\s*"\w+",\s*"message":\s*"[^"]+`).Match(body) {
				t.Errorf("%s: got %d %s, want %d with an error body", tc.name, resp.StatusCode, body, tc.status)
			}
			after, _ := c.Lambdas(ctx)
			if fmt.Sprint(before) != fmt.Sprint(after) {
				t.Errorf("%s: the request changed the stored tasks", tc.name)
			}
		}
	})
	t.Run("idempotent schedule and cancel", func(t *testing.T) {
		t.Parallel()
		req := client.ScheduleRequest{ID: "once", Payload: []byte(`{"a":1}`), Delay: "1h"}
		first := schedule(t, c, "echo", req)
		again, created, err := c.Schedule(ctx, "echo", req)
		if err != nil || created || again.ID != first.ID {
			t.Fatalf("replay: created=%v err=%v", created, err)
		}
		req.Payload = []byte(`{"a":2}`)
		var apiErr *client.Error
		if _, _, err := c.Schedule(ctx, "echo", req); !errors.As(err, &apiErr) || apiErr.Status != 409 {
			t.Fatalf("same id, other request: %v, want 409", err)
		}
		if tk, err := c.Cancel(ctx, "echo", "once"); err != nil || tk.Status != task.StatusCancelled {
			t.Fatalf("cancel: %v %v", tk.Status, err)
		}
		if tk, err := c.Cancel(ctx, "echo", "once"); err != nil || tk.Status != task.StatusCancelled {
			t.Fatalf("cancel again: %v %v, want it cancelled, as it stands", tk.Status, err)
		}
	})
}

// TestCrash kills atf dev with SIGKILL while tasks run and starts it again on the same database:
// every accepted task still ends, none is lost.
func TestCrash(t *testing.T) { testCrash(t, embedded) }

// TestCrashAWS does the same on DynamoDB and SQS, where the tasks that were running come back
// through their heartbeat timeouts, and a task enqueued whose message the kill kept from being
// sent through its enqueue timeout (5 s here).
func TestCrashAWS(t *testing.T) { testCrash(t, withEnqueueTimeout(onAWS)) }

// TestCrashFunctions does it with the function handlers.
func TestCrashFunctions(t *testing.T) { testCrash(t, withEnqueueTimeout(onAWSFunctions)) }

func withEnqueueTimeout(b backend) backend {
	return func(t *testing.T) []string { return append(b(t), "--enqueue-timeout", "5s") }
}

func testCrash(t *testing.T, b backend) {
	handlers, db := handlersDir(t), b(t)
	dev := startDev(t, handlers, db, "--concurrency", "2")
	var ids []string
	for range 8 {
		ids = append(ids, schedule(t, dev.client, "slow", client.ScheduleRequest{}).ID)
	}
	for i := 0; ; i++ { // wait until some run
		tasks, _, err := dev.client.List(context.Background(), task.ListParams{Lambda: "slow", Status: task.StatusProcessing})
		if err == nil && len(tasks) > 0 {
			break
		}
		if i > 200 {
			t.Fatal("no task started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	dev.stop(syscall.SIGKILL)

	dev = startDev(t, handlers, db, "--concurrency", "4")
	for _, id := range ids {
		if done := waitTerminal(t, dev.client, "slow", id); done.Status != task.StatusSuccess {
			t.Fatalf("task %s ended %s: %s", id, done.Status, done.Error)
		}
	}
	// a graceful stop leaves nothing running
	dev.stop(syscall.SIGTERM)
	if code := dev.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("atf dev exited %d after SIGTERM", code)
	}
}

// TestCLI runs the client commands against a running atf dev.
func TestCLI(t *testing.T) {
	dev := startDev(t, handlersDir(t), embedded(t))
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(atfBin, append(args, "--endpoint", dev.client.Endpoint)...).CombinedOutput()
		return string(out), err
	}
	out, err := cli("schedule", "echo", "--id", "cli-1", "--payload", `{"x":1}`, "--json")
	if err != nil || !strings.Contains(out, `"id": "cli-1"`) {
		t.Fatalf("schedule: %v\n%s", err, out)
	}
	waitTerminal(t, dev.client, "echo", "cli-1")
	if out, err := cli("get", "echo", "cli-1"); err != nil || !regexp.MustCompile(`status:\s+success`).MatchString(out) {
		t.Fatalf("get: %v\n%s", err, out)
	}
	// --key gives the task its tenant, and get shows it.
	if out, err := cli("schedule", "record", "--id", "cli-key", "--key", "tenant-1", "--delay", "1h", "--json"); err != nil || !strings.Contains(out, `"key": "tenant-1"`) {
		t.Fatalf("schedule --key: %v\n%s", err, out)
	}
	if out, err := cli("get", "record", "cli-key"); err != nil || !regexp.MustCompile(`key:\s+tenant-1`).MatchString(out) {
		t.Fatalf("get of a task with a key: %v\n%s", err, out)
	}
	if out, err := cli("schedule", "record", "--key", "has space"); err == nil || !strings.Contains(out, `key "has space"`) {
		t.Fatalf("schedule with an invalid key: want the rule, got %v\n%s", err, out)
	}
	// --wait answers once the task ended, or with the task as it stands when the wait is over.
	if _, err := cli("schedule", "echo", "--id", "cli-wait", "--delay", "1s"); err != nil {
		t.Fatal(err)
	}
	if out, err := cli("get", "echo", "cli-wait", "--wait", "1m"); err != nil || !regexp.MustCompile(`status:\s+success`).MatchString(out) {
		t.Fatalf("get --wait: %v\n%s", err, out)
	}
	if _, err := cli("schedule", "echo", "--id", "cli-later", "--delay", "1h"); err != nil {
		t.Fatal(err)
	}
	if out, err := cli("get", "echo", "cli-later", "--wait", "50ms"); err != nil || !regexp.MustCompile(`status:\s+new`).MatchString(out) {
		t.Fatalf("get --wait of a later task: %v\n%s", err, out)
	}
	if out, err := cli("get", "echo", "cli-later", "--wait", "soon"); err == nil || !strings.Contains(out, "--wait") {
		t.Fatalf("get --wait soon: want an error naming --wait, got %v\n%s", err, out)
	}
	if out, err := cli("attempts", "echo", "cli-1"); err != nil || !regexp.MustCompile(`(?m)^1\s+\d{4}-\d\d-\d\d .*\ssuccess\s`).MatchString(out) {
		t.Fatalf("attempts: want attempt 1, its start and its outcome: %v\n%s", err, out)
	}
	if out, err := cli("attempts", "echo", "cli-1", "--json"); err != nil || !strings.Contains(out, `"outcome": "success"`) || !strings.Contains(out, `"attempts_dropped": 0`) {
		t.Fatalf("attempts --json: %v\n%s", err, out)
	}
	// A program that writes a line to standard error and succeeds has that line in its
	// attempt's log, which atf logs prints.
	if _, err := cli("schedule", "logged", "--id", "log-1"); err != nil {
		t.Fatal(err)
	}
	if done := waitTerminal(t, dev.client, "logged", "log-1"); done.Status != task.StatusSuccess {
		t.Fatalf("logged task ended %s: %s", done.Status, done.Error)
	}
	if h, err := dev.client.Attempts(t.Context(), "logged", "log-1"); err != nil || len(h.Attempts) != 1 || h.Attempts[0].Log != "processing log-1\n" {
		t.Fatalf("Attempts: %+v, %v; want one attempt whose log is the line written to stderr", h, err)
	}
	if out, err := cli("logs", "logged", "log-1"); err != nil || out != "processing log-1\n" {
		t.Fatalf("logs: %v\n%q", err, out)
	}
	if out, err := cli("logs", "logged/log-1", "--attempt", "1", "--json"); err != nil || !strings.Contains(out, `"log": "processing log-1\n"`) || !strings.Contains(out, `"attempt": 1`) {
		t.Fatalf("logs --attempt 1 --json: %v\n%s", err, out)
	}
	if out, err := cli("logs", "logged", "log-1", "--attempt", "2"); err == nil || !strings.Contains(out, "keeps no attempt 2") {
		t.Fatalf("logs --attempt 2: want an error naming the attempts kept, got %v\n%s", err, out)
	}
	if out, err := cli("logs", "echo", "cli-1"); err != nil || !strings.Contains(out, "attempt 1 (success) kept no log") {
		t.Fatalf("logs of an attempt without a log: %v\n%s", err, out)
	}
	if out, err := cli("list", "echo", "--status", "success"); err != nil || !strings.Contains(out, "cli-1") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if out, err := cli("gate", "echo", "pause"); err != nil || !strings.Contains(out, "pause") {
		t.Fatalf("gate: %v\n%s", err, out)
	}
	if out, err := cli("lambdas"); err != nil || !regexp.MustCompile(`echo\s+high,normal,low\s+lambda=pause\s+new=1 success=2`).MatchString(out) {
		t.Fatalf("lambdas: %v\n%s", err, out)
	}
	// Behind more new tasks than a page reads, two of a rare collection: the API's first pages of
	// status new in that collection are empty, with a cursor; list fills its page from the next.
	for range 3 {
		var batch []client.ScheduleRequest
		for range task.MaxBatch {
			batch = append(batch, client.ScheduleRequest{Delay: "1h", Collection: "bulk"})
		}
		if _, _, err := dev.client.ScheduleBatch(t.Context(), "echo", batch); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"rare-1", "rare-2"} {
		if _, _, err := dev.client.Schedule(t.Context(), "echo", client.ScheduleRequest{ID: id, Delay: "1h", Collection: "rare"}); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := cli("list", "echo", "--status", "new", "--collection", "rare", "--limit", "2"); err != nil ||
		!strings.Contains(out, "rare-1") || !strings.Contains(out, "rare-2") {
		t.Fatalf("list of a sparse filter: want both rare tasks, got %v\n%s", err, out)
	}
	if out, err := cli("schedule", "nope"); err == nil || !strings.Contains(out, `lambda "nope" is not registered`) {
		t.Fatalf("unknown lambda: want a non-zero exit and the API's message, got %v\n%s", err, out)
	}
	if out, err := cli("get", "echo"); err == nil || !strings.Contains(out, "needs 2 argument") {
		t.Fatalf("missing argument: %v\n%s", err, out)
	}
}

func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// TestExamples runs the sample lambdas of functions/workers, as `make run` does, and the README
// tour's diamond: a → {b, c} → d, where d, a join, gets b's and c's results.
func TestExamples(t *testing.T) {
	dev := startDev(t, examplesDir, embedded(t))
	c := dev.client
	echo := schedule(t, c, "echo", client.ScheduleRequest{Payload: []byte(`{"hi":"there"}`)})
	flaky := schedule(t, c, "flaky", client.ScheduleRequest{Payload: []byte(`{"failures":1}`)})
	sleep := schedule(t, c, "sleep", client.ScheduleRequest{Payload: []byte(`{"seconds":0.1}`)})
	badSleep := schedule(t, c, "sleep", client.ScheduleRequest{Payload: []byte(`"not an object"`)})
	g := &client.Graph{Lambda: "echo"}
	a := g.Add(client.ScheduleRequest{Payload: []byte(`{"text":"a"}`)})
	d := g.Chord([]task.Ref{a}, []client.ScheduleRequest{{ID: "b", Payload: []byte(`{"text":"b"}`)}, {ID: "c", Payload: []byte(`{"text":"c"}`)}},
		client.ScheduleRequest{Lambda: "join"})
	if _, created, err := c.ScheduleGraph(t.Context(), g); err != nil || !created {
		t.Fatalf("schedule the diamond: created %v, %v", created, err)
	}
	for _, tc := range []struct {
		lambda string
		tk     task.Task
		status task.Status
		result string
	}{
		{"echo", echo, task.StatusSuccess, `{"hi":"there"}`},
		{"flaky", flaky, task.StatusSuccess, `{"succeeded_on_attempt":2}`},
		{"sleep", sleep, task.StatusSuccess, `{"slept_seconds":0.1}`},
		{"sleep", badSleep, task.StatusFatalFailure, `null`},
		{"join", task.Task{ID: d.ID}, task.StatusSuccess, `{"echo/b":{"text":"b"},"echo/c":{"text":"c"}}`},
	} {
		done := waitTerminal(t, c, tc.lambda, tc.tk.ID)
		if done.Status != tc.status || compact(done.Result) != tc.result {
			t.Errorf("%s: %s with %s (error %q), want %s with %s", tc.lambda, done.Status, done.Result, done.Error, tc.status, tc.result)
		}
	}
}
