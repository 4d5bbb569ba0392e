package consumer_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/task"
)

// blockedDue is a store whose due reads for one lambda hang until released (or their context
// ends): a throttled or slow shard.
type blockedDue struct {
	task.Store
	lambda  string
	release chan struct{}
	blocked atomic.Int64
}

func (s *blockedDue) Due(ctx context.Context, p task.DueParams) ([]task.Task, error) {
	if err := s.block(ctx, p.Lambda); err != nil {
		return nil, err
	}
	return s.Store.Due(ctx, p)
}

func (s *blockedDue) Triggered(ctx context.Context, lambda string) (bool, error) {
	if err := s.block(ctx, lambda); err != nil {
		return false, err
	}
	return s.Store.Triggered(ctx, lambda)
}

// block holds a read of s.lambda until release.
func (s *blockedDue) block(ctx context.Context, lambda string) error {
	if lambda != s.lambda {
		return nil
	}
	s.blocked.Add(1)
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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

// countsStore reports the enqueued count it is told to, when set (drifted counts), and counts the
// calls of Counts.
type countsStore struct {
	task.Store
	enqueued *int
	calls    atomic.Int64
}

func (s *countsStore) Counts(ctx context.Context, lambda string) (map[task.Status]int, error) {
	s.calls.Add(1)
	counts, err := s.Store.Counts(ctx, lambda)
	if err == nil && s.enqueued != nil {
		counts[task.StatusEnqueued] = *s.enqueued
	}
	return counts, err
}

func (e *env) countStatus(t *testing.T, lambda string, s task.Status) int {
	t.Helper()
	counts, err := e.store.Counts(context.Background(), lambda)
	if err != nil {
		t.Fatal(err)
	}
	return counts[s]
}

// TestInFlightCapped: 200 due tasks, no worker, at most 50 enqueued at once. Sweeps keep 50 in
// the queue and resend only those, ever more rarely: the messages are bounded by the cap, not by
// the backlog.
func TestInFlightCapped(t *testing.T) {
	q := &failingQueue{}
	const n, limit = 200, 50
	timeout, poll, elapsed := 100*time.Millisecond, 50*time.Millisecond, time.Second
	e := newEnvWith(t, options{cfg: task.Config{EnqueueTimeout: timeout, PollInterval: poll}, maxEnqueued: limit,
		wrapQueue: func(inner task.Queue) task.Queue { q.Queue = inner; return q }}, "l")
	for i := range n {
		e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("t%03d", i)})
	}
	for range elapsed / poll {
		st := e.sweep(t)
		if got := e.countStatus(t, "l", task.StatusEnqueued); got > limit {
			t.Fatalf("%d tasks enqueued at once, want at most %d", got, limit)
		}
		if st.Full {
			t.Fatalf("a pass cut by the cap reported a full quota: %+v", st)
		}
		e.now = e.now.Add(poll)
	}
	if got := e.countStatus(t, "l", task.StatusEnqueued); got != limit {
		t.Errorf("%d tasks enqueued, want the cap, %d", got, limit)
	}
	bound := int(limit * (1 + math.Log2(float64(elapsed/timeout))))
	if q.sent > bound {
		t.Errorf("%d messages for %d tasks with at most %d enqueued, want at most %d", q.sent, n, limit, bound)
	}
	t.Logf("%d messages", q.sent)
}

// TestInFlightRefilled: as workers claim tasks, the next pass enqueues as many more.
func TestInFlightRefilled(t *testing.T) {
	e := newEnvWith(t, options{maxEnqueued: 5}, "l")
	for i := range 12 {
		e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("t%02d", i)})
	}
	if st := e.sweep(t); st.Enqueued != 5 || st.Capped != 7 {
		t.Fatalf("first pass: %+v, want 5 enqueued, 7 left waiting", st)
	}
	for _, id := range e.received(t, "l", "normal")[:3] {
		if _, err := task.Apply(context.Background(), e.store, "l", id, func(tk task.Task) (task.Task, error) {
			return task.Claim(tk, "lease", e.now, e.cfg)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.sweep(t); st.Enqueued != 3 {
		t.Fatalf("after 3 claims: %+v, want 3 more enqueued", st)
	}
	if got := e.received(t, "l", "normal"); fmt.Sprint(got) != "[t05 t06 t07]" {
		t.Errorf("messages %v, want the next three in due order", got)
	}
}

// TestInFlightIdleReadsNoCounts: a pass that finds nothing to enqueue reads no counts.
func TestInFlightIdleReadsNoCounts(t *testing.T) {
	s := &countsStore{}
	e := newEnvWith(t, options{wrapStore: func(inner task.Store) task.Store { s.Store = inner; return s }}, "l")
	e.schedule(t, "l", task.Spec{ID: "later", Delay: ptr(time.Hour)})
	e.sweep(t)
	if n := s.calls.Load(); n != 0 {
		t.Errorf("an idle pass read the counts %d times", n)
	}
	e.now = e.now.Add(time.Hour)
	if st := e.sweep(t); st.Enqueued != 1 || s.calls.Load() != 1 {
		t.Errorf("a pass with a due task: %+v, %d count reads; want it enqueued after one", st, s.calls.Load())
	}
}

// TestInFlightDriftedCounts: counts that drifted far above the cap hold no resend back, and no
// waiting task past the grace; counts that drifted below zero count as none.
func TestInFlightDriftedCounts(t *testing.T) {
	drift := 1 << 20
	s := &countsStore{enqueued: &drift}
	e := newEnvWith(t, options{cfg: task.Config{EnqueueTimeout: time.Minute}, maxEnqueued: 10,
		wrapStore: func(inner task.Store) task.Store { s.Store = inner; return s }}, "l")
	resent := e.schedule(t, "l", task.Spec{ID: "resent"})
	if _, err := task.Apply(context.Background(), e.store, "l", resent.ID, func(tk task.Task) (task.Task, error) {
		return task.Enqueue(tk, e.now, e.cfg)
	}); err != nil {
		t.Fatal(err)
	}
	e.schedule(t, "l", task.Spec{ID: "waiting"})
	e.now = e.now.Add(time.Minute)
	if st := e.sweep(t); st.Enqueued != 1 || st.Capped != 1 {
		t.Fatalf("counts far above the cap: %+v, want the resend sent and the waiting task left", st)
	}
	if got := e.received(t, "l", "normal"); fmt.Sprint(got) != "[resent]" {
		t.Fatalf("messages %v, want [resent]", got)
	}
	e.now = e.now.Add(task.MaxEnqueueWait)
	if st := e.sweep(t); st.Enqueued != 2 || st.Capped != 0 {
		t.Fatalf("past the grace: %+v, want the waiting task enqueued (and the resend due again)", st)
	}

	drift = -1 << 20
	for i := range 30 {
		e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("t%02d", i)})
	}
	if st := e.sweep(t); st.Enqueued != 10 {
		t.Errorf("counts below zero: %+v, want the cap of 10 enqueued", st)
	}
}

// TestLostMessageResentBehindCappedBacklog: a lambda at its cap, whose enqueued tasks' messages
// were all lost, with more than a quota of new tasks due before their resends. The next pass
// resends the lost messages: their lane is apart from the waiting tasks', which the cap holds.
func TestLostMessageResentBehindCappedBacklog(t *testing.T) {
	const quota, limit = 5, 8
	timeout := time.Minute
	e := newEnvWith(t, options{cfg: task.Config{EnqueueQuota: quota, EnqueueTimeout: timeout}, maxEnqueued: limit}, "l")
	var lost []string
	for i := range limit { // enqueued without their messages
		tk := e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("lost%d", i)})
		if _, err := task.Apply(context.Background(), e.store, "l", tk.ID, func(tk task.Task) (task.Task, error) {
			return task.Enqueue(tk, e.now, e.cfg)
		}); err != nil {
			t.Fatal(err)
		}
		lost = append(lost, tk.ID)
	}
	for i := range 3 * quota {
		e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("new%02d", i)})
	}
	e.now = e.now.Add(timeout)
	st := e.sweep(t)
	if st.Enqueued != quota || !st.Full {
		t.Fatalf("pass: %+v, want a full quota of %d resends", st, quota)
	}
	got := e.received(t, "l", "normal")
	if len(got) != quota || !slices.Equal(got, lost[:quota]) {
		t.Fatalf("messages %v, want the first %d lost ones, %v", got, quota, lost[:quota])
	}
	if st = e.sweep(t); st.Enqueued != limit-quota || st.Capped == 0 {
		t.Fatalf("second pass: %+v, want the other %d resends and the new tasks capped", st, limit-quota)
	}
}

// TestClaimRefillsCappedLambda: Run polls once an hour here. A lambda whose pass was cut by its
// cap gets its next pass at once when its workers claim a task (Claimed), not at the next poll.
func TestClaimRefillsCappedLambda(t *testing.T) {
	const limit = 8 // a claim of an eighth of the cap, one, refills it
	e := newEnvWith(t, options{maxEnqueued: limit}, "l")
	for i := range 3 * limit {
		e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("t%02d", i)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan consumer.RunStats)
	go func() { done <- e.cons.Run(ctx, consumer.RunParams{Interval: time.Hour}) }()
	defer func() {
		cancel()
		if st := <-done; st.Passes < 2 || st.Enqueued != limit+1 {
			t.Errorf("run: %+v, want the cap's worth enqueued, then the one claimed", st)
		}
	}()
	claimed := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if !claimed && e.countStatus(t, "l", task.StatusEnqueued) == limit {
			// The pass writes its tasks enqueued before it sends their messages.
			ids := e.received(t, "l", "normal")
			if len(ids) == 0 {
				continue
			}
			id := ids[0]
			if _, err := task.Apply(context.Background(), e.store, "l", id, func(tk task.Task) (task.Task, error) {
				return task.Claim(tk, "lease", e.now, e.cfg)
			}); err != nil {
				t.Fatal(err)
			}
			claimed = true
		}
		if claimed {
			e.cons.Claimed("l") // as the workers' status controller does; a no-op until the capped pass has ended
			if e.countStatus(t, "l", task.StatusEnqueued) == limit && e.countStatus(t, "l", task.StatusProcessing) == 1 {
				return
			}
		}
	}
	t.Fatal("no pass refilled the capped lambda after a claim")
}

// TestEnqueuesCountedBeforeSent: on a store that gathers counts (task.CountGatherer, as
// DynamoDB's does), a pass's enqueues are in the counts before their messages go, so that a
// claim of one cannot take it out of the counts first and leave the room too large.
func TestEnqueuesCountedBeforeSent(t *testing.T) {
	log := &countLog{}
	e := newEnvWith(t, options{
		wrapStore: func(inner task.Store) task.Store { return gatherStore{Store: inner, log: log} },
		wrapQueue: func(inner task.Queue) task.Queue { return sendLog{Queue: inner, log: log} },
	}, "l")
	for i := range 30 {
		e.schedule(t, "l", task.Spec{ID: fmt.Sprintf("t%02d", i)})
	}
	if st := e.sweep(t); st.Enqueued != 30 {
		t.Fatalf("the pass enqueued %d, want 30", st.Enqueued)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.unflushed) == 0 || slices.ContainsFunc(log.unflushed, func(n int) bool { return n != 0 }) {
		t.Errorf("moves written but not counted at each send: %v, want none", log.unflushed)
	}
}

// countLog records, at each send, how many moves were written under a gathering of counts and
// not yet flushed.
type countLog struct {
	mu        sync.Mutex
	gathers   []*int
	unflushed []int
}

type gatherKey struct{}

// gatherStore gathers counts as dynamostore does: moves written under GatherCounts wait for
// its flush.
type gatherStore struct {
	task.Store
	log *countLog
}

func (s gatherStore) GatherCounts(ctx context.Context) (context.Context, func()) {
	n := new(int)
	s.log.mu.Lock()
	s.log.gathers = append(s.log.gathers, n)
	s.log.mu.Unlock()
	return context.WithValue(ctx, gatherKey{}, n), func() {
		s.log.mu.Lock()
		*n = 0
		s.log.mu.Unlock()
	}
}

func (s gatherStore) Update(ctx context.Context, t task.Task, prev int64) error {
	err := s.Store.Update(ctx, t, prev)
	if n, ok := ctx.Value(gatherKey{}).(*int); ok && err == nil {
		s.log.mu.Lock()
		*n++
		s.log.mu.Unlock()
	}
	return err
}

type sendLog struct {
	task.Queue
	log *countLog
}

func (q sendLog) Send(ctx context.Context, msgs ...task.Message) error {
	q.log.mu.Lock()
	total := 0
	for _, n := range q.log.gathers {
		total += *n
	}
	q.log.unflushed = append(q.log.unflushed, total)
	q.log.mu.Unlock()
	return q.Queue.Send(ctx, msgs...)
}
