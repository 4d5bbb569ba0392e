package consumer_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// blockedDue is a store whose due queries for one lambda hang until released (or their context
// ends): a throttled or slow shard.
type blockedDue struct {
	task.Store
	lambda  string
	release chan struct{}
	blocked atomic.Int64
}

func (s *blockedDue) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	if p.Lambda == s.lambda {
		s.blocked.Add(1)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Due(ctx, p)
}

// waitMessage waits for one message of lambda's normal queue. The bound only ends a test that
// fails: the message comes at once when the consumer works.
func (e *env) waitMessage(t *testing.T, lambda string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		ds, err := e.queue.Receive(ctx, task.ReceiveParams{Lambda: lambda, Priority: "normal", Max: 1, Wait: time.Second, Visibility: time.Hour})
		if err == nil && len(ds) == 1 {
			return ds[0].TaskID
		}
	}
	t.Fatalf("no message for lambda %s", lambda)
	return ""
}

// TestSlowLambdaDelaysNoOther: while one lambda's due query hangs, another lambda's due task is
// still enqueued, within the same sweep.
func TestSlowLambdaDelaysNoOther(t *testing.T) {
	slow := &blockedDue{lambda: "slow", release: make(chan struct{})}
	e := newEnvWith(t, options{wrapStore: func(s task.Store) task.Store { slow.Store = s; return slow }}, "slow", "fast")
	e.schedule(t, "fast", task.Spec{ID: "f1"})
	swept := make(chan error, 1)
	go func() {
		_, err := e.cons.Sweep(t.Context())
		swept <- err
	}()
	defer func() { close(slow.release); <-swept }()
	if id := e.waitMessage(t, "fast"); id != "f1" {
		t.Fatalf("fast got %s", id)
	}
}

// TestSlowLambdaHoldsNoPass: a running consumer keeps sweeping the other lambdas while one
// lambda's pass hangs: each of their tasks is enqueued while that pass is still in flight.
func TestSlowLambdaHoldsNoPass(t *testing.T) {
	slow := &blockedDue{lambda: "slow", release: make(chan struct{})}
	e := newEnvWith(t, options{cfg: task.Config{PollInterval: 10 * time.Millisecond},
		wrapStore: func(s task.Store) task.Store { slow.Store = s; return slow }}, "slow", "fast")
	e.cons.Start()
	defer e.cons.Stop()
	defer close(slow.release)
	for i := range 3 {
		id := fmt.Sprintf("f%d", i)
		e.schedule(t, "fast", task.Spec{ID: id})
		e.cons.Wake()
		if got := e.waitMessage(t, "fast"); got != id {
			t.Fatalf("fast got %s, want %s", got, id)
		}
	}
	if slow.blocked.Load() == 0 {
		t.Fatal("the slow lambda was never swept")
	}
}

// cutAfterWrites cancels the sweep once its enqueue writes have gone through, before its send:
// the function's deadline striking between the two.
type cutAfterWrites struct {
	task.Store
	cancel context.CancelFunc
}

func (s *cutAfterWrites) Update(ctx context.Context, t task.Task, prev int64) error {
	err := s.Store.Update(ctx, t, prev)
	if t.Status == task.StatusEnqueued {
		s.cancel()
	}
	return err
}

// TestCutSweepStillSends: a sweep cut short after its enqueue writes still sends a message for
// every task it left enqueued.
func TestCutSweepStillSends(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e := newEnvWith(t, options{wrapStore: func(s task.Store) task.Store { return &cutAfterWrites{s, cancel} }}, "l")
	for i := range 5 {
		e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("t%d", i)})
	}
	e.cons.Sweep(ctx) // cut short: its error is expected
	sent := map[string]bool{}
	for _, id := range e.received(t, "l", "normal") {
		sent[id] = true
	}
	enqueued := 0
	for i := range 5 {
		id := fmt.Sprintf("t%d", i)
		if e.status(t, "l", id) == task.StatusEnqueued {
			enqueued++
			if !sent[id] {
				t.Errorf("%s is enqueued without a message: it waits for the enqueue timeout", id)
			}
		}
	}
	if enqueued == 0 {
		t.Fatal("nothing was enqueued")
	}
}

// failingQueue fails its sends while fail says so, and counts the messages it took.
type failingQueue struct {
	task.Queue
	mu    sync.Mutex
	fail  func(call int) bool
	calls int
	sent  int
}

func (q *failingQueue) Send(ctx context.Context, msgs ...task.Message) error {
	q.mu.Lock()
	q.calls++
	failed := q.fail != nil && q.fail(q.calls)
	if !failed {
		q.sent += len(msgs)
	}
	q.mu.Unlock()
	if failed {
		return task.Errorf(task.ErrThrottled, "send failed on purpose")
	}
	return q.Queue.Send(ctx, msgs...)
}

// TestFailedSendRetried: a send that fails once is tried again within the sweep.
func TestFailedSendRetried(t *testing.T) {
	q := &failingQueue{fail: func(call int) bool { return call == 1 }}
	e := newEnvWith(t, options{wrapQueue: func(inner task.Queue) task.Queue { q.Queue = inner; return q }}, "l")
	e.schedule(t, "l", task.Spec{ID: "once"})
	if st, err := e.cons.Sweep(t.Context()); err != nil || st.Enqueued != 1 {
		t.Errorf("sweep: %+v, %v; want the task sent on the second try", st, err)
	}
	if got := e.received(t, "l", "normal"); len(got) != 1 || got[0] != "once" {
		t.Fatalf("one failed send: messages %v, want [once]", got)
	}
}

// TestUnsentDueAtNextPoll: a task whose sends all failed is due again at the next poll, and
// sent then, not after the enqueue timeout.
func TestUnsentDueAtNextPoll(t *testing.T) {
	down := true
	q := &failingQueue{fail: func(int) bool { return down }}
	e := newEnvWith(t, options{wrapQueue: func(inner task.Queue) task.Queue { q.Queue = inner; return q }}, "l")
	e.schedule(t, "l", task.Spec{ID: "outage"})
	if _, err := e.cons.Sweep(t.Context()); err == nil {
		t.Error("a sweep whose sends all failed reported no error")
	}
	down = false
	e.now = e.now.Add(e.cfg.PollInterval)
	e.sweep(t)
	if got := e.received(t, "l", "normal"); len(got) != 1 || got[0] != "outage" {
		t.Fatalf("a poll interval after the queue came back: messages %v, want [outage]", got)
	}
}

// TestBacklogNotAmplified: 200 tasks wait in their queue with no worker, and a short enqueue
// timeout. Sweeps re-send a task's message ever more rarely, so a second of sweeps adds about
// log2(1 s / timeout) messages per task, not one per timeout.
func TestBacklogNotAmplified(t *testing.T) {
	q := &failingQueue{}
	timeout, poll, elapsed := 100*time.Millisecond, 50*time.Millisecond, time.Second
	e := newEnvWith(t, options{cfg: task.Config{EnqueueTimeout: timeout, PollInterval: poll},
		wrapQueue: func(inner task.Queue) task.Queue { q.Queue = inner; return q }}, "l")
	const n = 200
	for i := range n {
		e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("t%03d", i)})
	}
	for range elapsed / poll {
		e.sweep(t)
		e.now = e.now.Add(poll)
	}
	bound := int(n * (1 + math.Log2(float64(elapsed/timeout))))
	if q.sent > bound {
		t.Errorf("%d messages for %d tasks waiting %s with a %s enqueue timeout, want at most %d", q.sent, n, elapsed, timeout, bound)
	}
	t.Logf("%d messages for %d tasks", q.sent, n)
	if q.sent < n {
		t.Errorf("%d messages for %d tasks", q.sent, n)
	}
}
