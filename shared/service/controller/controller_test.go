package controller

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// harness is a controller of lambda "l" on the embedded store and the in-memory queue. Its
// handler records the order in which tasks start; a task whose id is in block runs until its
// channel is closed or its context ends.
type harness struct {
	t      *testing.T
	store  *sqlitestore.Store
	queue  *countingQueue
	lambda task.Lambda
	cfg    task.Config
	status executor.Status

	mu      sync.Mutex
	started []string
	block   map[string]chan struct{}
}

func newHarness(t *testing.T, concurrency int) *harness {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	h := &harness{
		t: t, store: store, queue: &countingQueue{Queue: memqueue.New(), received: map[string]int{}, extended: map[string]int{}, refused: map[string]int{}, deleted: map[string]bool{}},
		lambda: task.Lambda{Name: "l", Concurrency: concurrency, Timeout: time.Minute}.WithDefaults(),
		cfg:    task.Config{}.WithDefaults(),
		block:  map[string]chan struct{}{},
	}
	h.status = status.New(store, status.Config{Task: h.cfg, Logger: quiet})
	return h
}

// blocker makes the handler hold task id until the returned function is called.
func (h *harness) blocker(id string) func() {
	ch := make(chan struct{})
	h.mu.Lock()
	h.block[id] = ch
	h.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

func (h *harness) handle(ctx context.Context, t worker.Task) (json.RawMessage, error) {
	h.mu.Lock()
	h.started = append(h.started, t.ID)
	ch := h.block[t.ID]
	h.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
		// A task stopped before it was let go fails, even if both happened by the time it looks.
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
	}
	return json.RawMessage(`{}`), nil
}

func (h *harness) start(c Config) *Controller { return h.startObserved(c, observer{}) }

// startObserved starts a controller with the test hooks of o.
func (h *harness) startObserved(c Config, o observer) *Controller {
	c.Lambda, c.Queue, c.Logger = h.lambda, h.queue, quiet
	c.Handler = worker.HandlerFunc(h.handle)
	c.Executor = executor.New(h.status, executor.Config{Task: task.Config{HeartbeatInterval: time.Second}, Logger: quiet})
	if c.IdleWait == 0 {
		c.IdleWait = 10 * time.Millisecond
	}
	ctl := start(c, o)
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ctl.Stop(ctx)
	})
	return ctl
}

// enqueue creates a task and moves it into its queue, as the consumer does.
func (h *harness) enqueue(id, priority string) {
	h.t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	tk, err := task.New(task.Spec{ID: id, Priority: priority}, h.lambda, now, h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.store.Create(ctx, tk); err != nil {
		h.t.Fatal(err)
	}
	next, err := task.Enqueue(tk, now, h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.store.Update(ctx, next, tk.Version); err != nil {
		h.t.Fatal(err)
	}
	h.send(id, priority)
}

func (h *harness) send(id, priority string) {
	h.t.Helper()
	if err := h.queue.Send(context.Background(), task.Message{Lambda: "l", Priority: priority, TaskID: id, Attempt: 1}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) get(id string) task.Task {
	h.t.Helper()
	tk, err := h.store.Get(context.Background(), "l", id)
	if err != nil {
		h.t.Fatal(err)
	}
	return tk
}

func (h *harness) startedIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.started)
}

// waitFor polls cond until it holds, or fails the test after timeout.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) waitStatus(id string, want task.Status) task.Task {
	h.t.Helper()
	var tk task.Task
	waitFor(h.t, "task "+id+" to be "+string(want), 10*time.Second, func() bool {
		tk = h.get(id)
		return tk.Status == want
	})
	return tk
}

func buffered(c *Controller) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.len()
}

// parked reports whether the fetcher has decided to receive nothing until a slot frees, and how
// many messages the buffer holds.
func parked(c *Controller) (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fetcherParked, c.buf.len()
}

// countingQueue counts what the controller receives and extends, by task id, the extensions the
// queue refused, and the receipts it deleted.
type countingQueue struct {
	*memqueue.Queue
	mu       sync.Mutex
	received map[string]int
	extended map[string]int
	refused  map[string]int
	woken    map[string]int // extensions to 0: made visible at once
	deleted  map[string]bool
	// receiveCounts are the receive counts of id's deliveries, in the order received.
	receiveCounts map[string][]int
}

func (q *countingQueue) Receive(ctx context.Context, p task.ReceiveParams) ([]task.Delivery, error) {
	ds, err := q.Queue.Receive(ctx, p)
	q.mu.Lock()
	if q.receiveCounts == nil {
		q.receiveCounts = map[string][]int{}
	}
	for _, d := range ds {
		q.received[d.TaskID]++
		q.receiveCounts[d.TaskID] = append(q.receiveCounts[d.TaskID], d.ReceiveCount)
	}
	q.mu.Unlock()
	return ds, err
}

func (q *countingQueue) Extend(ctx context.Context, d task.Delivery, v time.Duration) error {
	err := q.Queue.Extend(ctx, d, v)
	if v == 0 && err == nil {
		q.mu.Lock()
		if q.woken == nil {
			q.woken = map[string]int{}
		}
		q.woken[d.TaskID]++
		q.mu.Unlock()
	}
	if v > 0 {
		q.mu.Lock()
		switch {
		case err == nil:
			q.extended[d.TaskID]++
		case errors.Is(err, task.ErrNotFound):
			q.refused[d.TaskID]++
		}
		q.mu.Unlock()
	}
	return err
}

func (q *countingQueue) Delete(ctx context.Context, d task.Delivery) error {
	err := q.Queue.Delete(ctx, d)
	if err == nil {
		q.mu.Lock()
		q.deleted[d.Receipt] = true
		q.mu.Unlock()
	}
	return err
}

func (q *countingQueue) counts(id string) (received, extended int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.received[id], q.extended[id]
}

// refusals returns how many extensions of id's message the queue refused: it was visible again.
func (q *countingQueue) refusals(id string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.refused[id]
}

func (q *countingQueue) wasDeleted(d task.Delivery) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.deleted[d.Receipt]
}

// visible receives, without waiting, every visible message of a priority (hiding them).
func (h *harness) visible(priority string) []string {
	h.t.Helper()
	ds, err := h.queue.Queue.Receive(context.Background(), task.ReceiveParams{Lambda: "l", Priority: priority, Max: memqueue.MaxReceive, Visibility: time.Minute})
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.TaskID)
	}
	slices.Sort(ids)
	return ids
}

// TestStrictPriorityWithBuffer: when a slot frees, the highest priority task starts, whether it
// sits in the buffer beside lower ones or arrived in its queue after lower ones were buffered.
func TestStrictPriorityWithBuffer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		prefetch int
		// waiting are sent while the first task holds the only slot; buffered is how many of
		// them the buffer holds before the late ones are sent.
		waiting  [][2]string
		buffered int
		late     [][2]string
		want     []string
	}{
		{
			name:     "higher arrives after the buffer is full",
			prefetch: 3,
			waiting:  [][2]string{{"low-1", "low"}, {"low-2", "low"}, {"low-3", "low"}, {"low-4", "low"}},
			buffered: 3,
			late:     [][2]string{{"normal-1", "normal"}, {"high-1", "high"}},
			want:     []string{"first", "high-1", "normal-1", "low-1", "low-2", "low-3", "low-4"},
		},
		{
			name:     "higher buffered beside lower",
			prefetch: 8,
			waiting:  [][2]string{{"low-1", "low"}, {"normal-1", "normal"}, {"low-2", "low"}, {"high-1", "high"}},
			buffered: 4,
			want:     []string{"first", "high-1", "normal-1", "low-1", "low-2"},
		},
		{
			name:     "no prefetch",
			prefetch: 0,
			waiting:  [][2]string{{"low-1", "low"}, {"low-2", "low"}},
			late:     [][2]string{{"high-1", "high"}},
			want:     []string{"first", "high-1", "low-1", "low-2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, 1)
			unblock := h.blocker("first")
			h.enqueue("first", "low")
			ctl := h.start(Config{Prefetch: tc.prefetch})
			waitFor(t, "the first task to start", 5*time.Second, func() bool { return len(h.startedIDs()) == 1 })
			for _, m := range tc.waiting {
				h.enqueue(m[0], m[1])
			}
			waitFor(t, "the buffer to fill", 5*time.Second, func() bool { return buffered(ctl) >= tc.buffered })
			if tc.buffered == tc.prefetch {
				// The buffer covers the busy slot and the prefetch: the fetcher must stop
				// receiving there and leave the other waiting messages in their queues.
				waitFor(t, "the fetcher to stop receiving", 5*time.Second, func() bool { p, _ := parked(ctl); return p })
				if _, n := parked(ctl); n != tc.buffered {
					t.Fatalf("the fetcher stopped with %d messages buffered, want %d", n, tc.buffered)
				}
				received := 0
				for _, m := range tc.waiting {
					n, _ := h.queue.counts(m[0])
					received += n
				}
				if received != tc.buffered {
					t.Fatalf("received %d of the waiting messages, want %d: the buffer holds at most Prefetch beyond the free slots", received, tc.buffered)
				}
			}
			for _, m := range tc.late {
				h.enqueue(m[0], m[1])
			}
			unblock()
			for _, id := range tc.want {
				h.waitStatus(id, task.StatusSuccess)
			}
			if got := h.startedIDs(); !slices.Equal(got, tc.want) {
				t.Fatalf("tasks started in the order %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBufferedMessageExtended: a message that waits in the buffer longer than its visibility
// stays hidden (no one else can take it) and runs once.
func TestBufferedMessageExtended(t *testing.T) {
	t.Parallel()
	const visibility = time.Second
	h := newHarness(t, 1)
	unblock := h.blocker("first")
	h.enqueue("first", "normal")
	ctl := h.start(Config{Prefetch: 1, Visibility: visibility})
	waitFor(t, "the first task to start", 5*time.Second, func() bool { return len(h.startedIDs()) == 1 })
	h.enqueue("waiting", "normal")
	waitFor(t, "the message to be buffered", 5*time.Second, func() bool { return buffered(ctl) == 1 })

	// The queue extends a message only while it is still hidden, and the controller extends it
	// when less than half its visibility is left: three extensions in a row mean it stayed
	// hidden, from one receive, for more than its visibility.
	waitFor(t, "three extensions of the buffered message", 20*visibility, func() bool {
		_, extended := h.queue.counts("waiting")
		return extended >= 3 || h.queue.refusals("waiting") > 0
	})
	if n := h.queue.refusals("waiting"); n > 0 {
		t.Fatalf("the buffered message became visible before it was extended (%d extensions refused)", n)
	}
	unblock()
	tk := h.waitStatus("waiting", task.StatusSuccess)
	if tk.Attempts != 1 {
		t.Fatalf("waiting task ran %d attempts, want 1", tk.Attempts)
	}
	received, extended := h.queue.counts("waiting")
	if received != 1 || extended < 3 {
		t.Fatalf("waiting message was received %d times and extended %d times; want once, and extended at least 3 times", received, extended)
	}
}

// TestStopReleasesBuffered: Stop hands buffered messages back at once, long before their
// visibility would end, and releases the task it had to stop.
func TestStopReleasesBuffered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	h.blocker("first") // runs until stopped
	h.enqueue("first", "high")
	ctl := h.start(Config{Prefetch: 3, Visibility: time.Hour})
	waitFor(t, "the first task to start", 5*time.Second, func() bool { return len(h.startedIDs()) == 1 })
	for _, id := range []string{"a", "b", "c"} {
		h.enqueue(id, "low")
	}
	waitFor(t, "the buffer to fill", 5*time.Second, func() bool { return buffered(ctl) == 3 })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	begin := time.Now()
	ctl.Stop(ctx)
	if took := time.Since(begin); took > 5*time.Second {
		t.Fatalf("Stop took %s", took)
	}
	if got := h.visible("low"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("visible after Stop: %v, want a, b and c", got)
	}
	for _, id := range []string{"a", "b", "c"} {
		if tk := h.get(id); tk.Status != task.StatusEnqueued || tk.Attempts != 0 {
			t.Fatalf("buffered task %s is %s after %d attempts; want enqueued and untried", id, tk.Status, tk.Attempts)
		}
	}
	if tk := h.get("first"); tk.Status != task.StatusNew || tk.Attempts != 0 {
		t.Fatalf("stopped task is %s after %d attempts; want released: new, untried", tk.Status, tk.Attempts)
	}
	if got := h.startedIDs(); len(got) != 1 {
		t.Fatalf("started %v after Stop began", got)
	}
}

// TestStopWaitsForRunning: running tasks finish within the drain, and are not released.
func TestStopWaitsForRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	unblock := h.blocker("slow")
	h.enqueue("slow", "normal")
	// The task ends while Stop waits for it; the handler fails if it was stopped before.
	ctl := h.startObserved(Config{Prefetch: 2}, observer{draining: unblock})
	waitFor(t, "the task to start", 5*time.Second, func() bool { return len(h.startedIDs()) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctl.Stop(ctx)
	if ctx.Err() != nil {
		t.Fatal("Stop waited for the drain timeout")
	}
	if tk := h.get("slow"); tk.Status != task.StatusSuccess {
		t.Fatalf("task is %s after a drain that outlasted it, want success", tk.Status)
	}
}

// TestDuplicatesDeleted: a second message of a running task, and a message of a task that does
// not exist, are deleted rather than left to come back, and the running task does not run again.
func TestDuplicatesDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	unblock := h.blocker("dup")
	h.enqueue("dup", "normal")
	settled := make(chan task.Delivery, 3)
	h.startObserved(Config{Prefetch: 2}, observer{settled: func(d task.Delivery) { settled <- d }})
	waitFor(t, "the task to start", 5*time.Second, func() bool { return len(h.startedIDs()) == 1 })
	h.send("dup", "normal")
	h.send("ghost", "normal")
	// The first message of dup settles only once its task ends; the two others settle first.
	for range 2 {
		select {
		case d := <-settled:
			if !h.queue.wasDeleted(d) {
				t.Fatalf("message of %s was settled and not deleted: it would come back after its visibility", d.TaskID)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the duplicate messages were not settled")
		}
	}
	unblock()
	if tk := h.waitStatus("dup", task.StatusSuccess); tk.Attempts != 1 {
		t.Fatalf("dup ran %d attempts, want 1", tk.Attempts)
	}
	if got := h.startedIDs(); !slices.Equal(got, []string{"dup"}) {
		t.Fatalf("started %v, want dup once", got)
	}
}

// lateClaim is a status controller whose claims are written at once and answered only when the
// caller's context ends, as an answer that comes just as the controller stops.
type lateClaim struct {
	executor.Status
	entered chan struct{}
	once    sync.Once
}

func (s *lateClaim) Claim(ctx context.Context, lambda, id, delivery, token string) (task.Task, error) {
	t, err := s.Status.Claim(ctx, lambda, id, delivery, token)
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	return t, err
}

// TestStopReleasesUnstartedTask: a task claimed but stopped before its handler started is
// released too, not left processing until its heartbeat timeout.
func TestStopReleasesUnstartedTask(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	late := &lateClaim{Status: h.status, entered: make(chan struct{})}
	h.status = late
	h.enqueue("t", "normal")
	ctl := h.start(Config{})
	select {
	case <-late.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("task was not claimed")
	}
	if tk := h.get("t"); tk.Status != task.StatusProcessing {
		t.Fatalf("task is %s, want processing", tk.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ctl.Stop(ctx)
	if tk := h.get("t"); tk.Status != task.StatusNew || tk.Attempts != 0 {
		t.Fatalf("task is %s after %d attempts; want released: new, untried", tk.Status, tk.Attempts)
	}
	if got := h.startedIDs(); len(got) > 0 {
		t.Fatalf("started %v after the stop", got)
	}
}

// failingQueue fails every Receive, and closes failed at the first.
type failingQueue struct {
	*memqueue.Queue
	once   sync.Once
	failed chan struct{}
}

func (q *failingQueue) Receive(context.Context, task.ReceiveParams) ([]task.Delivery, error) {
	q.once.Do(func() { close(q.failed) })
	return nil, errors.New("queue is down")
}

// TestStopWhileReceiveFails: a controller whose queue fails rests an IdleWait (an hour here)
// before it tries again, and Stop ends that rest rather than waiting it out.
func TestStopWhileReceiveFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	q := &failingQueue{Queue: memqueue.New(), failed: make(chan struct{})}
	ctl := Start(Config{
		Lambda: h.lambda, Queue: q, Handler: worker.HandlerFunc(h.handle),
		Executor: executor.New(h.status, executor.Config{Task: task.Config{HeartbeatInterval: time.Second}, Logger: quiet}), IdleWait: time.Hour, Prefetch: 1, Logger: quiet,
	})
	<-q.failed
	stopped := make(chan struct{})
	go func() {
		ctl.Stop(context.Background())
		ctl.Stop(context.Background()) // a second Stop is a no-op
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop is waiting out the rest after a failed receive")
	}
}
