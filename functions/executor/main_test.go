package main

// The acceptance test of the ECS executor: the real binary, on DynamoDB and SQS (the emulators of
// `make emulators`, or any endpoint in the AWS environment), stopped with SIGTERM while tasks run.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/ecsexecutor"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

var executorBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "atf-executor")
	if err != nil {
		panic(err)
	}
	executorBin = filepath.Join(dir, "executor")
	if out, err := exec.Command("go", "build", "-o", executorBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build executor: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// handlersDir writes executable scripts, name to body, into a new folder.
func handlersDir(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBadConfigExits: the binary says what is wrong, as JSON, and exits non-zero.
func TestBadConfigExits(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(executorBin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2; output:\n%s", err, out)
	}
	var rec struct{ Level, Msg, Err string }
	if err := json.Unmarshal(out, &rec); err != nil || rec.Level != "ERROR" || !strings.Contains(rec.Err, awsfn.EnvTable) {
		t.Fatalf("want one JSON error line naming %s, got %q (%v)", awsfn.EnvTable, out, err)
	}
}

// stack is a DynamoDB table and SQS queues of one test, deleted when it ends.
type stack struct {
	name   string
	lambda task.Lambda
	cfg    task.Config
	store  *dynamostore.Store
	queue  *sqsqueue.Queue
	sqs    *sqs.Client
	spec   string // ATF_LAMBDAS: the lambda alone
}

const lambdaSpec = `[{"name":"nap","concurrency":4,"timeout":"1m"}]`

func newStack(t *testing.T) *stack { return newStackOf(t, lambdaSpec) }

// newStackOf makes the table and the queues of the lambda of spec, ATF_LAMBDAS of one lambda.
func newStackOf(t *testing.T, spec string) *stack {
	t.Helper()
	dbCfg, sqsCfg := awstest.Config(t, "DYNAMODB"), awstest.Config(t, "SQS")
	ctx := context.Background()
	s := &stack{name: awstest.Name("atf-exec"), sqs: sqs.NewFromConfig(sqsCfg), cfg: task.Config{}.WithDefaults(), spec: spec}
	db := awstest.NewDynamoDB(dbCfg)
	awstest.Cleanup(t, s.name)
	var specs []awsfn.LambdaSpec
	if err := json.Unmarshal([]byte(spec), &specs); err != nil {
		t.Fatal(err)
	}
	l, err := specs[0].Lambda()
	if err != nil {
		t.Fatal(err)
	}
	s.lambda = l
	if err := dynamostore.CreateTable(ctx, db, s.name); err != nil {
		t.Fatal(err)
	}
	if s.store, err = dynamostore.New(db, dynamostore.Config{Table: s.name, Shards: 2}); err != nil {
		t.Fatal(err)
	}
	if s.queue, err = sqsqueue.New(s.sqs, sqsqueue.Config{Prefix: s.name}); err != nil {
		t.Fatal(err)
	}
	if err := s.queue.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *stack) consumer() *consumer.Consumer {
	return consumer.New(s.store, s.queue, consumer.Config{
		Lambdas: task.FixedCatalog{s.lambda}, Task: task.Config{PollInterval: 200 * time.Millisecond},
	})
}

// schedule creates n tasks, spread over the priorities, whose payload is how long they sleep,
// and has the consumer enqueue them.
func (s *stack) schedule(t *testing.T, n int, sleep string) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		spec := task.Spec{ID: fmt.Sprintf("task-%02d", i), Priority: s.lambda.Priorities[i%len(s.lambda.Priorities)], Payload: json.RawMessage(sleep)}
		tk, err := task.New(spec, s.lambda, time.Now().UTC(), s.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.store.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
	}
	st, err := s.consumer().Sweep(ctx)
	if err != nil || st.Enqueued != n {
		t.Fatalf("sweep enqueued %d of %d tasks: %v", st.Enqueued, n, err)
	}
	return ids
}

func (s *stack) tasks(t *testing.T, ids []string) map[string]task.Task {
	t.Helper()
	m := map[string]task.Task{}
	for _, id := range ids {
		tk, err := s.store.Get(context.Background(), s.lambda.Name, id)
		if err != nil {
			t.Fatal(err)
		}
		m[id] = tk
	}
	return m
}

func withStatus(tasks map[string]task.Task, st task.Status) []string {
	var ids []string
	for id, tk := range tasks {
		if tk.Status == st {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// messages sums the visible and the hidden (in flight) messages of the lambda's queues.
func (s *stack) messages(t *testing.T) (visible, hidden int) {
	t.Helper()
	ctx := context.Background()
	for _, p := range s.lambda.Priorities {
		name, err := sqsqueue.QueueName(s.name, s.lambda.Name, p)
		if err != nil {
			t.Fatal(err)
		}
		url, err := s.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name})
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		}})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
		h, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
		visible, hidden = visible+v, hidden+h
	}
	return visible, hidden
}

// process is a running executor binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	log  []string
}

// startExecutor runs the executor of s's lambda on s with the handlers of dir, and env (NAME=value)
// added to its environment.
func (s *stack) startExecutor(t *testing.T, dir string, drain time.Duration, env ...string) *process {
	t.Helper()
	cmd := exec.Command(executorBin)
	cmd.Env = append(os.Environ(),
		awsfn.EnvTable+"="+s.name, awsfn.EnvQueuePrefix+"="+s.name, awsfn.EnvShards+"=2",
		awsfn.EnvLambdas+"="+s.spec, awsfn.EnvLambda+"="+s.lambda.Name, awsfn.EnvHeartbeat+"=1s",
		ecsexecutor.EnvHandlers+"="+dir, ecsexecutor.EnvConcurrency+"=4", ecsexecutor.EnvPrefetch+"=4", ecsexecutor.EnvDrain+"="+drain.String())
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("executor log:\n%s", strings.Join(p.lines(), "\n"))
		}
	})
	return p
}

func (p *process) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// terminate sends SIGTERM and waits up to limit for the process to exit 0; it returns how long
// that took.
func (p *process) terminate(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("executor still running %s after SIGTERM", limit)
	}
	took := time.Since(begin)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("executor exited %d after SIGTERM, want 0", code)
	}
	for _, line := range p.lines() {
		if !json.Valid([]byte(line)) {
			t.Fatalf("log line is not JSON: %s", line)
		}
	}
	return took
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSIGTERM is the acceptance test: SIGTERM while tasks run. In-flight tasks finish, or are
// released, within the drain timeout; buffered messages go back to their queues at once; the
// process exits 0; and a second executor runs every task to success: nothing is lost.
func TestSIGTERM(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		sleep string // seconds each task sleeps
		drain time.Duration
		// finish: the tasks running at SIGTERM end in success; otherwise they are released.
		finish bool
	}{
		{name: "running tasks finish within the drain", sleep: "1.5", drain: 30 * time.Second, finish: true},
		{name: "drain shorter than the tasks", sleep: "3", drain: 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t)
			dir := handlersDir(t, map[string]string{"nap.sh": `sleep "$(cat)"; echo '{"slept":true}'`})
			ids := s.schedule(t, 12, tc.sleep)
			exe := s.startExecutor(t, dir, tc.drain)

			// Wait until every slot runs a task and the buffer holds messages.
			var running []string
			waitFor(t, "4 tasks to run and messages to be buffered", 60*time.Second, func() bool {
				running = withStatus(s.tasks(t, ids), task.StatusProcessing)
				_, hidden := s.messages(t)
				return len(running) == 4 && hidden > 0
			})
			took := exe.terminate(t, tc.drain+15*time.Second)
			t.Logf("exited %s after SIGTERM, drain %s", took.Round(time.Millisecond), tc.drain)
			if limit := tc.drain + 5*time.Second; took > limit {
				t.Fatalf("exit took %s, over the drain plus the time to release (%s)", took, limit)
			}

			after := s.tasks(t, ids)
			for _, id := range running {
				tk := after[id]
				switch {
				case tk.Status == task.StatusSuccess && tk.Attempts == 1:
				case tk.Status == task.StatusNew && tk.Attempts == 0 && !tc.finish:
				default:
					t.Errorf("task %s, running at SIGTERM, is %s after %d attempts (%s)", id, tk.Status, tk.Attempts, tk.Error)
				}
			}
			released := withStatus(after, task.StatusNew)
			if !tc.finish && len(released) == 0 {
				t.Error("the drain was shorter than the tasks, yet none was released")
			}
			enqueued := withStatus(after, task.StatusEnqueued)
			if n := len(withStatus(after, task.StatusSuccess)) + len(released) + len(enqueued); n != len(ids) {
				t.Errorf("after the drain %d tasks are success, new or enqueued; want all %d: %v", n, len(ids), after)
			}
			// Nothing stays hidden by the stopped executor: every enqueued task's message is
			// visible at once, not after its visibility timeout.
			if visible, hidden := s.messages(t); hidden != 0 || visible != len(enqueued) {
				t.Errorf("queues hold %d visible and %d hidden messages after the drain; want %d visible (one per enqueued task) and none hidden",
					visible, hidden, len(enqueued))
			}
			if t.Failed() {
				t.FailNow()
			}

			// A second executor, and the consumer that enqueues the released tasks again.
			cons := s.consumer()
			cons.Start()
			defer cons.Stop()
			second := s.startExecutor(t, dir, 30*time.Second)
			waitFor(t, "every task to succeed", 90*time.Second, func() bool {
				return len(withStatus(s.tasks(t, ids), task.StatusSuccess)) == len(ids)
			})
			for id, tk := range s.tasks(t, ids) {
				if tk.Attempts != 1 {
					t.Errorf("task %s succeeded after %d attempts, want 1: a released run does not count", id, tk.Attempts)
				}
			}
			second.terminate(t, 10*time.Second)
		})
	}
}

// TestProgramLambda: the program lambda of lambdas.json (its "program", a Python script) runs
// under the executor binary with the program where its image puts it (infra/executor/Dockerfile):
// in the handlers folder under the lambda's name, without its extension.
func TestProgramLambda(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load(filepath.Join("..", "..", registry.File))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(reg.Lambdas, func(e registry.Entry) bool { return e.Program != "" })
	if i < 0 {
		t.Fatal("lambdas.json has no program lambda")
	}
	e := reg.Lambdas[i]
	spec, err := reg.LambdasJSON(e.Name)
	if err != nil {
		t.Fatal(err)
	}
	s := newStackOf(t, spec)
	program, err := os.ReadFile(reg.ProgramPath(e))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, e.Name), program, 0o755); err != nil {
		t.Fatal(err)
	}
	ids := s.schedule(t, 1, `{"text": "to be or not to be"}`)
	exe := s.startExecutor(t, dir, 10*time.Second)
	var got task.Task
	waitFor(t, "the task to end", 60*time.Second, func() bool {
		got = s.tasks(t, ids)[ids[0]]
		return got.Status.Terminal()
	})
	if got.Status != task.StatusSuccess || string(got.Result) != `{"words":6}` {
		t.Errorf("%s with %s (error %q), want success with {\"words\":6}", got.Status, got.Result, got.Error)
	}
	exe.terminate(t, 20*time.Second)
}
