package sqsworker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/task"
)

// holding holds back the claims of tasks "rated" (by a rate, until a time it keeps) and
// "capped" (by a concurrency cap, with no until); other claims go through.
type holding struct {
	executor.Status
	until time.Time
}

func (h holding) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	switch id {
	case "rated":
		return task.Task{}, &task.Held{Limit: "key_rate", Until: h.until}
	case "capped":
		return task.Task{}, &task.Held{Limit: "key_concurrency"}
	}
	return h.Status.Claim(ctx, lambda, id, delivery, token)
}

// sending is a queue that records visibility changes and the messages sent again.
type sending struct {
	visibilities
	mu   sync.Mutex
	sent []task.Message
}

func (s *sending) Send(_ context.Context, msgs ...task.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, msgs...)
	return nil
}

// TestHeldRecordWaits: a record whose claim a limit held fails, its message hidden until the
// rate's Until, or for the concurrency backoff by its receive count, rather than the retry delay
// or the queue's timeout; from executor.HoldResendAt receives it is sent again, delayed, and the
// record acknowledged, so that its receive count starts again and never reaches the queue's
// maxReceiveCount. The tasks stay enqueued, untried.
func TestHeldRecordWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, id := range []string{"rated", "capped"} {
		e.put(t, id, `{}`, 0, false)
	}
	until := time.Now().Add(10 * time.Minute)
	q := &sending{}
	h := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: holding{Status: e.hsc, until: until}, Queue: q})

	ev := event("rated", "capped")
	ev.Records[1].Attributes["ApproximateReceiveCount"] = "2"
	resp, err := h.Handle(context.Background(), ev)
	must(t, err)
	if got, want := failures(resp), ids(ev, 0, 1); !slices.Equal(got, want) {
		t.Fatalf("batchItemFailures %v, want %v", got, want)
	}
	if rated := q.calls["rh-rated"]; rated <= 10*time.Minute-time.Minute || rated > 10*time.Minute {
		t.Fatalf("the rated record is hidden for %s, want until the rate's Until, 10 minutes from now", rated)
	}
	if capped := q.calls["rh-capped"]; capped != 2*executor.HoldBackoffBase {
		t.Fatalf("the capped record is hidden for %s, want the backoff of its second receive, %s", capped, 2*executor.HoldBackoffBase)
	}
	if len(q.sent) != 0 {
		t.Fatalf("sent again %+v, want none before %d receives", q.sent, executor.HoldResendAt)
	}

	q = &sending{}
	h = newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: holding{Status: e.hsc, until: until}, Queue: q})
	ev = event("capped")
	ev.Records[0].Attributes["ApproximateReceiveCount"] = "5"
	resp, err = h.Handle(context.Background(), ev)
	must(t, err)
	if len(resp.BatchItemFailures) != 0 || len(q.calls) != 0 {
		t.Fatalf("batchItemFailures %v, visibility changed %v; want the record acknowledged", failures(resp), q.calls)
	}
	if len(q.sent) != 1 || q.sent[0].TaskID != "capped" || q.sent[0].Lambda != echo.Name || q.sent[0].Priority != "normal" || q.sent[0].Delay != executor.HoldBackoffMax {
		t.Fatalf("sent again %+v, want the capped task's message, delayed %s", q.sent, executor.HoldBackoffMax)
	}
	for _, id := range []string{"rated", "capped"} {
		if got := e.get(t, id); got.Status != task.StatusEnqueued || got.Attempts != 0 {
			t.Fatalf("task %s is %s after %d attempts, want enqueued, untried", id, got.Status, got.Attempts)
		}
	}
}

// slowBatch is a queue whose second extension of a batch (the first tick) stays under way until
// release is closed; it keeps each receipt's last visibility, in the order the calls complete.
type slowBatch struct {
	mu       sync.Mutex
	batches  int
	inFlight chan struct{} // closed when the slow extension starts
	release  chan struct{}
	last     map[string]time.Duration
}

func (q *slowBatch) ExtendAll(_ context.Context, ds []task.Delivery, v time.Duration) error {
	q.mu.Lock()
	q.batches++
	slow := q.batches == 2
	q.mu.Unlock()
	if slow {
		close(q.inFlight)
		<-q.release
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range ds {
		q.last[d.Receipt] = v
	}
	return nil
}

func (q *slowBatch) Extend(_ context.Context, d task.Delivery, v time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.last[d.Receipt] = v
	return nil
}

// heldAfter holds back every claim by a cap, once the batch's slow extension is under way.
type heldAfter struct {
	executor.Status
	inFlight chan struct{}
}

func (h heldAfter) Claim(context.Context, string, string, string, string) (task.Task, error) {
	<-h.inFlight
	return task.Task{}, &task.Held{Limit: "max_running"}
}

// TestHoldNotOverriddenByBatchExtension: a held record's message keeps the hold's visibility
// even when an extension of its batch was under way as the hold was set: the record leaves the
// batch's extensions, waiting for the one in flight, before it hides its message. (Else the
// batch's extension landed after, and the message came back a heartbeat timeout later.)
func TestHoldNotOverriddenByBatchExtension(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.put(t, "capped", `{}`, 0, false)
	q := &slowBatch{inFlight: make(chan struct{}), release: make(chan struct{}), last: map[string]time.Duration{}}
	go func() {
		<-q.inFlight
		time.Sleep(100 * time.Millisecond) // the hold reaches the queue meanwhile, if it does not wait
		close(q.release)
	}()
	_, err := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: heldAfter{Status: e.hsc, inFlight: q.inFlight}, Queue: q}).Handle(context.Background(), event("capped"))
	must(t, err)
	q.mu.Lock()
	defer q.mu.Unlock()
	if got, want := q.last["rh-capped"], executor.HoldDelay(&task.Held{Limit: "max_running"}, 1, time.Now()); got != want {
		t.Fatalf("the held message's visibility is %s in the end, want the hold's %s", got, want)
	}
}
