package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

type receiveCounter struct {
	*memqueue.Queue
	n atomic.Int64
}

func (q *receiveCounter) Receive(ctx context.Context, p task.ReceiveParams) ([]task.Delivery, error) {
	q.n.Add(1)
	return q.Queue.Receive(ctx, p)
}

// TestIdleFetcherDoesNotSpin: a visible message of a priority the lambda no longer lists (a task
// stored under an older registry, resent by Recover or the resend lane) ends every idle long poll
// of the in-memory queue at once; the fetcher must still pass at most once an IdleWait, not in a
// tight loop.
func TestIdleFetcherDoesNotSpin(t *testing.T) {
	h := newHarness(t, 1)
	h.lambda = task.Lambda{Name: "l", Concurrency: 1, Timeout: time.Minute, Priorities: []string{"high", "normal"}}.WithDefaults()
	q := &receiveCounter{Queue: memqueue.New()}
	if err := q.Send(context.Background(), task.Message{Lambda: "l", Priority: "low", TaskID: "orphan"}); err != nil {
		t.Fatal(err)
	}
	const idle = 50 * time.Millisecond
	ctl := Start(Config{
		Lambda: h.lambda, Queue: q, Handler: worker.HandlerFunc(h.handle),
		Executor: executor.New(h.status, executor.Config{Task: task.Config{HeartbeatInterval: time.Second}, Logger: quiet}),
		IdleWait: idle, Logger: quiet,
	})
	defer ctl.Stop(context.Background())
	time.Sleep(500 * time.Millisecond)
	n := q.n.Load()
	// Two priorities, one long poll of IdleWait per pass: about 2 * 500ms/50ms = 20 receives.
	if n > 100 {
		t.Fatalf("%d receives in 500 ms with IdleWait %s: the idle fetcher spins", n, idle)
	}
	t.Logf("%d receives", n)
}
