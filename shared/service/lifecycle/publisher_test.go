package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

var quiet = slog.New(slog.DiscardHandler)

// recorder is a sink that keeps what it was given. fail, if set, decides the outcome of each
// entry of each call: "" puts it; otherwise it fails with that code (retriable unless
// InvalidArgument). gate, if set, holds every call until it is closed.
type recorder struct {
	mu      sync.Mutex
	batches [][]lifecycle.Entry
	put     map[string]int // event id → times put
	fail    func(call int, id string) string
	calls   int
	gate    chan struct{}
}

func newRecorder() *recorder { return &recorder{put: map[string]int{}} }

func eventID(e lifecycle.Entry) string {
	var ev lifecycle.Event
	if err := json.Unmarshal(e.Detail, &ev); err != nil {
		panic(err)
	}
	return ev.ID
}

func (r *recorder) Put(ctx context.Context, batch []lifecycle.Entry) ([]lifecycle.Failure, error) {
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.batches = append(r.batches, batch)
	var failures []lifecycle.Failure
	for i, e := range batch {
		id := eventID(e)
		if r.fail != nil {
			if code := r.fail(r.calls, id); code != "" {
				failures = append(failures, lifecycle.Failure{Index: i, Code: code, Retriable: code != "InvalidArgument"})
				continue
			}
		}
		r.put[id]++
	}
	return failures, nil
}

func (r *recorder) snapshot() (batches [][]lifecycle.Entry, put map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	put = map[string]int{}
	for k, v := range r.put {
		put[k] = v
	}
	return append([][]lifecycle.Entry(nil), r.batches...), put
}

func event(i int) lifecycle.Event {
	return lifecycle.Event{ID: fmt.Sprintf("echo/t%d/2", i), Type: lifecycle.Succeeded, Lambda: "echo", TaskID: fmt.Sprintf("t%d", i),
		Priority: "normal", Status: task.StatusSuccess, PreviousStatus: task.StatusProcessing, Attempt: 1, MaxAttempts: 3, Version: 2, Time: t0}
}

func start(t *testing.T, c lifecycle.Config) *lifecycle.Publisher {
	t.Helper()
	c.Logger = quiet
	p, err := lifecycle.NewPublisher(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func flush(t *testing.T, p *lifecycle.Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBatches: 1,000 events published at once go out in batches of at most 10, each once, and
// Flush returns once they are all out.
func TestBatches(t *testing.T) {
	r := newRecorder()
	r.gate = make(chan struct{})
	p := start(t, lifecycle.Config{Sink: r, Senders: 2})
	for i := range 1000 {
		p.Publish(event(i))
	}
	close(r.gate) // the buffer holds them all before the first put ends
	flush(t, p)
	batches, put := r.snapshot()
	full := 0
	for _, b := range batches {
		if len(b) > lifecycle.MaxBatchEntries {
			t.Fatalf("a batch of %d entries", len(b))
		}
		if len(b) == lifecycle.MaxBatchEntries {
			full++
		}
		for _, e := range b {
			if e.DetailType != "task.succeeded" || !e.Time.Equal(t0) {
				t.Fatalf("entry %+v", e)
			}
		}
	}
	if len(put) != 1000 {
		t.Fatalf("%d distinct events put, want 1000", len(put))
	}
	for id, n := range put {
		if n != 1 {
			t.Fatalf("%s put %d times", id, n)
		}
	}
	// Only the first put of each sender can have found the buffer nearly empty.
	if full < len(batches)-2 {
		t.Errorf("%d of %d batches full, want all but the senders' first", full, len(batches))
	}
	if s := p.Stats(); s.Published != 1000 || s.Sent != 1000 || s.Dropped != 0 || s.Failed != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestRetriesFailedEntries: the entries a put reports failed retriably are put again, and only
// they; one the bus refuses is not, and one that keeps failing is given up after Attempts; both
// are counted as failed.
func TestRetriesFailedEntries(t *testing.T) {
	r := newRecorder()
	r.fail = func(call int, id string) string {
		switch {
		case id == "echo/t3/2" && call <= 2: // fails twice, then goes
			return "ThrottlingException"
		case id == "echo/t5/2":
			return "InvalidArgument"
		case id == "echo/t7/2":
			return "InternalFailure"
		}
		return ""
	}
	r.gate = make(chan struct{})
	p := start(t, lifecycle.Config{Sink: r, Senders: 1, Attempts: 3, RetryBackoff: time.Millisecond})
	for i := range 10 {
		p.Publish(event(i))
	}
	close(r.gate)
	flush(t, p)
	batches, put := r.snapshot()
	for i := range 10 {
		id := fmt.Sprintf("echo/t%d/2", i)
		want := 1
		if i == 5 || i == 7 {
			want = 0
		}
		if put[id] != want {
			t.Errorf("%s put %d times, want %d", id, put[id], want)
		}
	}
	// Each entry is put once, but t3 (twice failed) three times, t7 (always failing) Attempts
	// times, and t5 (refused) once.
	tries := map[string]int{}
	for _, b := range batches {
		for _, e := range b {
			tries[eventID(e)]++
		}
	}
	for i := range 10 {
		id := fmt.Sprintf("echo/t%d/2", i)
		want := 1
		if i == 3 || i == 7 {
			want = 3
		}
		if tries[id] != want {
			t.Errorf("%s tried %d times, want %d", id, tries[id], want)
		}
	}
	if s := p.Stats(); s.Sent != 8 || s.Failed != 2 {
		t.Errorf("stats %+v: want 8 sent and 2 failed", s)
	}
}

// errSink fails every put until healed, then hands over to next.
type errSink struct {
	mu     sync.Mutex
	healed bool
	calls  int
	next   lifecycle.Sink
}

func (s *errSink) Put(ctx context.Context, batch []lifecycle.Entry) ([]lifecycle.Failure, error) {
	s.mu.Lock()
	s.calls++
	healed := s.healed
	s.mu.Unlock()
	if !healed {
		return nil, errors.New("connection refused")
	}
	return s.next.Put(ctx, batch)
}

// TestRetriesFailedPuts: a put that fails whole is tried again with backoff, and once the sink
// works the events go out; with the sink down for good they are given up after Attempts puts.
func TestRetriesFailedPuts(t *testing.T) {
	r := newRecorder()
	s := &errSink{next: r}
	p := start(t, lifecycle.Config{Sink: s, Senders: 1, Attempts: 5, RetryBackoff: 20 * time.Millisecond})
	p.Publish(event(1))
	for {
		s.mu.Lock()
		calls := s.calls
		if calls >= 2 {
			s.healed = true
		}
		s.mu.Unlock()
		if calls >= 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	flush(t, p)
	if _, put := r.snapshot(); put["echo/t1/2"] != 1 {
		t.Errorf("the event was put %d times after the sink healed, want 1", put["echo/t1/2"])
	}

	down := &errSink{}
	p2 := start(t, lifecycle.Config{Sink: down, Senders: 1, Attempts: 3, RetryBackoff: time.Millisecond})
	p2.Publish(event(2))
	flush(t, p2)
	if down.calls != 3 || p2.Stats().Failed != 1 {
		t.Errorf("%d puts, stats %+v: want 3 puts and the event failed", down.calls, p2.Stats())
	}
}

// TestFullBuffer: with the sink stuck, Publish drops what the buffer cannot hold, without
// blocking, and counts it; Flush gives up at its deadline; what was buffered goes once the sink
// moves.
func TestFullBuffer(t *testing.T) {
	r := newRecorder()
	r.gate = make(chan struct{})
	p := start(t, lifecycle.Config{Sink: r, Senders: 1, Buffer: 20})
	for i := range 100 {
		p.Publish(event(i)) // returns at once though no put ends
	}
	s := p.Stats()
	// The sender holds at most a batch; the buffer 20.
	if s.Dropped < 100-20-lifecycle.MaxBatchEntries || s.Published != 100 {
		t.Fatalf("stats %+v: want at least %d dropped", s, 100-20-lifecycle.MaxBatchEntries)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := p.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with the sink stuck: %v", err)
	}
	close(r.gate)
	flush(t, p)
	if s := p.Stats(); s.Sent+s.Dropped != 100 {
		t.Errorf("stats %+v: every event is sent or dropped", s)
	}
}

// TestClose: Close sends what is buffered; later events are dropped, and a second Close is safe.
func TestClose(t *testing.T) {
	r := newRecorder()
	p := start(t, lifecycle.Config{Sink: r})
	for i := range 25 {
		p.Publish(event(i))
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.Publish(event(99))
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Sent != 25 || s.Dropped != 1 {
		t.Errorf("stats %+v: want 25 sent, 1 dropped", s)
	}
	var nilPublisher *lifecycle.Publisher
	nilPublisher.Publish(event(1))
	if nilPublisher.Flush(t.Context()) != nil || nilPublisher.Close(t.Context()) != nil {
		t.Error("a nil publisher fails")
	}
}

// TestFlushAfter: a handler wrapped by FlushAfter returns only once the events its invocation
// published are out (or the flush timed out), with the handler's own answer.
func TestFlushAfter(t *testing.T) {
	r := newRecorder()
	r.gate = make(chan struct{})
	p := start(t, lifecycle.Config{Sink: r})
	h := lifecycle.FlushAfter(func(ctx context.Context, n int) (string, error) {
		for i := range n {
			p.Publish(event(i))
		}
		return "done", nil
	}, p, 10*time.Second)
	go func() { time.Sleep(20 * time.Millisecond); close(r.gate) }()
	out, err := h(t.Context(), 15)
	if out != "done" || err != nil {
		t.Fatalf("got %q, %v", out, err)
	}
	if _, put := r.snapshot(); len(put) != 15 {
		t.Errorf("%d events out when the handler returned, want 15", len(put))
	}
	// A sink that never answers costs the invocation the flush timeout, not more.
	stuck := newRecorder()
	stuck.gate = make(chan struct{})
	defer close(stuck.gate)
	ps := start(t, lifecycle.Config{Sink: stuck})
	hs := lifecycle.FlushAfterErr(func(ctx context.Context, _ struct{}) error { ps.Publish(event(1)); return errors.New("boom") }, ps, 10*time.Millisecond)
	if err := hs(t.Context(), struct{}{}); err == nil || err.Error() != "boom" {
		t.Fatalf("got %v, want the handler's error", err)
	}
	if lifecycle.FlushAfter(func(ctx context.Context, n int) (int, error) { return n, nil }, nil, time.Second) == nil {
		t.Fatal("FlushAfter without a publisher returns no handler")
	}
}

// TestStore: the store wrapper publishes the event of each successful write that makes one, and
// nothing for a write that fails.
func TestStore(t *testing.T) {
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got collect
	s := lifecycle.Wrap(db, &got)
	ctx := t.Context()
	a, b, c := newTask(t, "a", 3), newTask(t, "b", 3), newTask(t, "c", 3)
	if err := s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBatch(ctx, []task.Task{b, c}); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, a); !errors.Is(err, task.ErrExists) {
		t.Fatalf("create again: %v", err)
	}
	// Through Apply and ApplyState, as the services write.
	if _, err := task.Apply(ctx, s, "echo", "a", func(tk task.Task) (task.Task, error) { return task.Enqueue(tk, t0, cfg) }); err != nil {
		t.Fatal(err)
	}
	if _, err := task.ApplyState(ctx, s, "echo", "a", func(tk task.Task) (task.Task, error) { return task.Claim(tk, "L", t0, cfg) }); err != nil {
		t.Fatal(err)
	}
	if _, err := task.ApplyState(ctx, s, "echo", "a", func(tk task.Task) (task.Task, error) { return task.Heartbeat(tk, "L", t0, cfg) }); err != nil {
		t.Fatal(err)
	}
	done, err := task.ApplyState(ctx, s, "echo", "a", func(tk task.Task) (task.Task, error) { return task.Succeed(tk, "L", nil, t0, cfg) })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, done, done.Version-1); !errors.Is(err, task.ErrConflict) { // written already
		t.Fatalf("update from a stale version: %v", err)
	}
	if _, err := task.Apply(ctx, s, "echo", "b", func(tk task.Task) (task.Task, error) { return task.Cancel(tk, t0) }); err != nil {
		t.Fatal(err)
	}
	want := []string{"scheduled echo/a/1", "scheduled echo/b/1", "scheduled echo/c/1", "started echo/a/3", "succeeded echo/a/5", "cancelled echo/b/2"}
	if fmt.Sprint(got.events) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", got.events, want)
	}
}

type collect struct{ events []string }

func (c *collect) Publish(e lifecycle.Event) { c.events = append(c.events, string(e.Type)+" "+e.ID) }
