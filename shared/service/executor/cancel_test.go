package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// callLog records the status calls an executor makes, in order, with how each was answered.
type callLog struct {
	executor.Status
	mu    sync.Mutex
	calls []string
}

func (c *callLog) add(s string) {
	c.mu.Lock()
	c.calls = append(c.calls, s)
	c.mu.Unlock()
}

func (c *callLog) Heartbeat(ctx context.Context, lambda, id, lease string) error {
	err := c.Status.Heartbeat(ctx, lambda, id, lease)
	switch {
	case errors.Is(err, task.ErrCancelled):
		c.add("heartbeat: cancelled")
	case err != nil:
		c.add("heartbeat: " + err.Error())
	default:
		c.add("heartbeat")
	}
	return err
}

func (c *callLog) SetResult(ctx context.Context, lambda, id, lease string, r status.Result) (task.Task, error) {
	t, err := c.Status.SetResult(ctx, lambda, id, lease, r)
	c.add("set_result " + string(r.Outcome) + ": " + string(t.Status))
	return t, err
}

// since returns the calls from the first that has prefix on.
func (c *callLog) since(prefix string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.calls {
		if strings.HasPrefix(s, prefix) {
			return append([]string(nil), c.calls[i:]...)
		}
	}
	return nil
}

// startCancelled creates task id, claims it, and returns it with a function that accepts a cancel
// of it, as the API does.
func (s setup) startCancelled(t *testing.T, id string) (executor.Claimed, func()) {
	t.Helper()
	tk, err := task.New(task.Spec{ID: id}, s.l, time.Now().UTC(), s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.store.Create(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
	return s.claimNext(t, id), func() {
		if _, err := task.Apply(context.Background(), s.store, s.l.Name, id, func(tk task.Task) (task.Task, error) {
			return task.Cancel(tk, time.Now().UTC())
		}); err != nil {
			t.Errorf("cancel: %v", err)
		}
	}
}

// TestCancelGoHandler: a Go handler whose task is cancelled while it runs sees its context
// cancelled with a worker.Cancellation as the cause, from the answer to the first heartbeat after
// the cancel; what it then returns (a success, here) is not kept, and the executor reports the
// outcome cancelled: heartbeat refused, then the report, and nothing else.
func TestCancelGoHandler(t *testing.T) {
	s := newSetup(t)
	claimed, cancelTask := s.startCancelled(t, "go")
	rec := &callLog{Status: s.hsc}
	var cause error
	s.executor(t, rec).Run(t.Context(), s.l, worker.HandlerFunc(func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
		cancelTask()
		<-ctx.Done()
		cause = context.Cause(ctx)
		return json.RawMessage(`"finished anyway"`), nil
	}), claimed)

	var c worker.Cancellation
	if !errors.Is(cause, worker.ErrCancelled) || !errors.As(cause, &c) || c.Grace <= 0 {
		t.Fatalf("the handler's context cause: %v, want a worker.Cancellation with a grace", cause)
	}
	want := []string{"heartbeat: cancelled", "set_result cancelled: cancelled"}
	if got := rec.since("heartbeat: cancelled"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("status calls from the cancel on: %q, want %q", got, want)
	}
	got, _ := s.store.Get(t.Context(), s.l.Name, "go")
	if got.Status != task.StatusCancelled || got.Result != nil {
		t.Fatalf("task %s with result %s, want cancelled without one", got.Status, got.Result)
	}
}

// TestCancelIgnored: a Go handler that ignores its cancel is stopped when its lease ends, as any
// handler that lost its lease (it is abandoned here: it never returns), and the task's timeout
// then ends it cancelled, not retried.
func TestCancelIgnored(t *testing.T) {
	s := newSetup(t)
	claimed, cancelTask := s.startCancelled(t, "stubborn")
	release := make(chan struct{})
	defer close(release)
	abandoned := make(chan struct{}, 1)
	rec := &callLog{Status: s.hsc}
	e := executor.New(rec, executor.Config{Task: s.cfg, Abandon: func(task.Task) { abandoned <- struct{}{} }})
	e.Run(t.Context(), s.l, worker.HandlerFunc(func(context.Context, worker.Task) (json.RawMessage, error) {
		cancelTask()
		<-release // ignores its context
		return nil, nil
	}), claimed)
	select {
	case <-abandoned:
	default:
		t.Fatal("Run returned without stopping the handler that ignored its cancel")
	}
	if got := rec.since("heartbeat: cancelled"); len(got) != 1 {
		t.Fatalf("status calls from the cancel on: %q, want the refused heartbeat alone", got)
	}
	for range 200 {
		if _, err := s.cons.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		got, _ := s.store.Get(t.Context(), s.l.Name, "stubborn")
		if got.Status.Terminal() || got.Status == task.StatusRetriableFailure {
			if got.Status != task.StatusCancelled || got.Attempts != 1 {
				t.Fatalf("task %s after %d attempts, want cancelled after 1", got.Status, got.Attempts)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the task never timed out")
}

// TestCancelProgram: a program (sleep 60) whose task is cancelled gets SIGTERM, and SIGKILL
// after the grace when it goes on; the task ends cancelled, reported after the program was gone.
func TestCancelProgram(t *testing.T) {
	s := newSetup(t)
	s.cfg.HeartbeatTimeout, s.cfg.LeaseMargin = 2*time.Second, 600*time.Millisecond
	claimed, cancelTask := s.startCancelled(t, "prog")
	dir := t.TempDir()
	mark := filepath.Join(dir, "mark")
	t.Setenv("MARK", mark)
	path := filepath.Join(dir, "h.sh")
	// Its trap notes the SIGTERM and goes on sleeping: only SIGKILL ends it.
	if err := os.WriteFile(path, []byte("#!/bin/sh\ntrap 'echo TERM >> \"$MARK\"' TERM\necho started >> \"$MARK\"\nsleep 60 & wait\nsleep 60\necho finished >> \"$MARK\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if b, _ := os.ReadFile(mark); strings.Contains(string(b), "started") {
				cancelTask()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	rec := &callLog{Status: s.hsc}
	const grace = 200 * time.Millisecond
	e := executor.New(rec, executor.Config{Task: s.cfg, CancelGrace: grace, Abandon: func(tk task.Task) {
		t.Errorf("abandoned the program of %s: it was not killed after its grace", tk.ID)
	}})
	e.Run(t.Context(), s.l, worker.Program{Path: path}, claimed)

	if b, _ := os.ReadFile(mark); string(b) != "started\nTERM\n" {
		t.Fatalf("the program wrote %q: want it started, got SIGTERM, and never finished (SIGKILL)", b)
	}
	want := []string{"heartbeat: cancelled", "set_result cancelled: cancelled"}
	if got := rec.since("heartbeat: cancelled"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("status calls from the cancel on: %q, want %q", got, want)
	}
	got, _ := s.store.Get(t.Context(), s.l.Name, "prog")
	if got.Status != task.StatusCancelled {
		t.Fatalf("task %s, want cancelled", got.Status)
	}
}
