package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/chaostest"
	"github.com/openatf/atf/shared/worker"
)

// testCancelRunning: a running Go handler and a running program (sleep 60) are cancelled through
// the API: the answer marks each (cancel_requested), the Go handler's context is cancelled with
// worker.ErrCancelled as its cause, the program is stopped, and each task ends cancelled without
// a result; nothing is written after, though the Go handler returns a success.
func testCancelRunning(t *testing.T, b backend) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sleeper"), []byte("#!/bin/sh\nsleep 60\necho '\"woke\"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	mux := worker.NewMux()
	mux.HandleFunc("waiter", func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return json.RawMessage(`"finished anyway"`), nil
	})
	timing := chaostest.Timing(b.aws)
	c := chaostest.Start(t, local.Config{Mux: mux, HandlersDir: dir, Store: b.store, Queue: b.queue, Concurrency: 2, Task: timing, MessageTimesLease: b.aws})
	ctx := t.Context()

	goTask, _, err := c.Schedule(ctx, "waiter", client.ScheduleRequest{})
	if err != nil {
		t.Fatal(err)
	}
	prog, _, err := c.Schedule(ctx, "sleeper", client.ScheduleRequest{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the Go handler never started")
	}
	running(t, c, "sleeper", prog.ID)

	for _, r := range []task.Ref{{Lambda: "waiter", ID: goTask.ID}, {Lambda: "sleeper", ID: prog.ID}} {
		marked, err := c.Cancel(ctx, r.Lambda, r.ID)
		if err != nil || !marked.CancelRequested || marked.Status != task.StatusProcessing {
			t.Fatalf("cancel %s: %s, requested %t, %v; want it processing and marked", r.Lambda, marked.Status, marked.CancelRequested, err)
		}
		again, err := c.Cancel(ctx, r.Lambda, r.ID)
		if err != nil || again.Version != marked.Version && again.Status != task.StatusCancelled {
			t.Errorf("cancel %s again: %+v, %v; want the same answer, unwritten", r.Lambda, again, err)
		}
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrCancelled) {
		t.Errorf("the Go handler's context cause: %v, want worker.ErrCancelled", cause)
	}
	for _, r := range []task.Ref{{Lambda: "waiter", ID: goTask.ID}, {Lambda: "sleeper", ID: prog.ID}} {
		got, err := c.GetWait(ctx, r.Lambda, r.ID, 25*time.Second)
		if err != nil || got.Status != task.StatusCancelled || (got.Result != nil && string(got.Result) != "null") || got.Attempts != 1 {
			t.Fatalf("%s: %s with result %s after %d attempts, %v; want cancelled, no result, one attempt", r.Lambda, got.Status, got.Result, got.Attempts, err)
		}
		// Past any report or timeout that could still come: nothing more is written.
		time.Sleep(2 * timing.HeartbeatTimeout)
		if later, err := c.Get(ctx, r.Lambda, r.ID); err != nil || later.Version != got.Version {
			t.Errorf("%s was written after it ended cancelled: version %d, was %d (%v)", r.Lambda, later.Version, got.Version, err)
		}
	}
}

// running waits until the task is processing: claimed, its handler starting.
func running(t *testing.T, c *client.Client, lambda, id string) {
	t.Helper()
	for range 600 {
		got, err := c.Get(t.Context(), lambda, id)
		if err == nil && got.Status == task.StatusProcessing {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s/%s never ran", lambda, id)
}

// TestBulkCancel: a bulk cancel by collection cancels that collection's waiting tasks a page at a
// time, and leaves the others.
func testBulkCancel(t *testing.T, b backend) {
	mux := worker.NewMux()
	mux.HandleFunc("bulk", func(context.Context, worker.Task) (json.RawMessage, error) { return nil, nil })
	c := chaostest.Start(t, local.Config{Mux: mux, Store: b.store, Queue: b.queue, Task: chaostest.Timing(b.aws), MessageTimesLease: b.aws})
	ctx := t.Context()
	// Paused, so that every task waits.
	if _, err := c.SetGate(ctx, "bulk", "", task.GatePause); err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		coll := "keep"
		if i%2 == 0 {
			coll = "drop"
		}
		if _, _, err := c.Schedule(ctx, "bulk", client.ScheduleRequest{Collection: coll}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CancelMatching(ctx, "bulk", client.CancelFilter{}); err == nil {
		t.Error("a bulk cancel without a filter was accepted")
	}
	if _, err := c.CancelMatching(ctx, "bulk", client.CancelFilter{Status: task.StatusSuccess}); err == nil {
		t.Error("a bulk cancel of ended tasks was accepted")
	}
	pages := 0
	f := client.CancelFilter{Collection: "drop", Limit: 2}
	sum := client.CancelPage{}
	for {
		p, err := c.CancelMatching(ctx, "bulk", f)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		sum.Cancelled += p.Cancelled
		if f.Cursor = p.NextCursor; f.Cursor == "" {
			break
		}
	}
	if sum.Cancelled != 4 || pages < 2 {
		t.Fatalf("cancelled %d in %d pages, want 4 in pages of 2", sum.Cancelled, pages)
	}
	again, err := c.CancelAll(ctx, "bulk", client.CancelFilter{Collection: "drop"})
	if err != nil || again.Cancelled != 0 || again.Skipped != 4 {
		t.Errorf("again: %+v, %v; want the 4 skipped", again, err)
	}
	tasks, _, err := c.ListUpTo(ctx, task.ListParams{Lambda: "bulk", Collection: "keep", Status: task.StatusCancelled}, 10)
	if err != nil || len(tasks) != 0 {
		t.Errorf("tasks of the other collection cancelled: %d, %v", len(tasks), err)
	}
}

func TestCancelRunning(t *testing.T)    { testCancelRunning(t, embedded(t)) }
func TestCancelRunningAWS(t *testing.T) { testCancelRunning(t, emulated(t, "waiter", "sleeper")) }
func TestBulkCancel(t *testing.T)       { testBulkCancel(t, embedded(t)) }
func TestBulkCancelAWS(t *testing.T)    { testBulkCancel(t, emulated(t, "bulk")) }
