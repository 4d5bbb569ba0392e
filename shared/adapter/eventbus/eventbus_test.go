package eventbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/eventbus"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/testkit/eventschema"
)

const atfEvents = `{"source":["atf"]}`

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func event(i int) lifecycle.Event {
	return lifecycle.Event{ID: fmt.Sprintf("echo/t%d/2", i), Type: lifecycle.Started, Lambda: "echo", TaskID: fmt.Sprintf("t%d", i),
		Priority: "normal", Status: task.StatusProcessing, PreviousStatus: task.StatusEnqueued, Attempt: 1, MaxAttempts: 3, Version: 2, Time: t0}
}

func entry(t *testing.T, e lifecycle.Event) lifecycle.Entry {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return lifecycle.Entry{DetailType: e.Type.DetailType(), Detail: b, Time: e.Time}
}

func sink(t *testing.T, b awstest.EventBus) *eventbus.Sink {
	t.Helper()
	s, err := eventbus.New(b.Events, b.Name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ids returns the event ids of received events, after checking each against its schema.
func ids(t *testing.T, got []json.RawMessage) map[string]int {
	t.Helper()
	dir, err := eventschema.Dir()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := eventschema.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range got {
		if _, err := schemas.Validate(m); err != nil {
			t.Errorf("%s: %v", m, err)
		}
		var env struct {
			Source     string          `json:"source"`
			DetailType string          `json:"detail-type"`
			Detail     lifecycle.Event `json:"detail"`
		}
		if err := json.Unmarshal(m, &env); err != nil {
			t.Fatal(err)
		}
		if env.Source != lifecycle.Source || env.DetailType != env.Detail.Type.DetailType() {
			t.Errorf("event %s: source %q, detail-type %q", env.Detail.ID, env.Source, env.DetailType)
		}
		out[env.Detail.ID]++
	}
	return out
}

func have(n int) func([]json.RawMessage) bool {
	return func(got []json.RawMessage) bool { return len(got) >= n }
}

// TestSink: a batch put on the emulated bus reaches the rule's target queue, entry by entry, as
// EventBridge shapes an event, valid against its schema.
func TestSink(t *testing.T) {
	b := awstest.NewEventBus(t, awstest.Name("atf-events"), atfEvents)
	var batch []lifecycle.Entry
	for i := range lifecycle.MaxBatchEntries {
		batch = append(batch, entry(t, event(i)))
	}
	failures, err := sink(t, b).Put(t.Context(), batch)
	if err != nil || failures != nil {
		t.Fatalf("put: %v, failures %+v", err, failures)
	}
	got := ids(t, b.Receive(t, 30*time.Second, have(10)))
	for i := range 10 {
		if id := fmt.Sprintf("echo/t%d/2", i); got[id] != 1 {
			t.Errorf("%s arrived %d times", id, got[id])
		}
	}
	if _, err := sink(t, b).Put(t.Context(), append(batch, batch[0])); err == nil {
		t.Error("a put of 11 entries went through")
	}
}

// TestSinkFailedEntries: an entry the bus refuses (FailedEntryCount) is reported by its index,
// as not to be retried, and the others of its batch go.
func TestSinkFailedEntries(t *testing.T) {
	b := awstest.NewEventBus(t, awstest.Name("atf-events"), atfEvents)
	batch := []lifecycle.Entry{entry(t, event(0)), {DetailType: "task.started", Time: t0}, entry(t, event(2))}
	failures, err := sink(t, b).Put(t.Context(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(failures) != 1 || failures[0].Index != 1 || failures[0].Retriable || failures[0].Code == "" {
		t.Fatalf("failures %+v: want entry 1, refused for good", failures)
	}
	got := ids(t, b.Receive(t, 30*time.Second, have(2)))
	if len(got) != 2 || got["echo/t0/2"] != 1 || got["echo/t2/2"] != 1 {
		t.Errorf("arrived %v, want t0 and t2", got)
	}
}

// counting passes batches on to a sink and records their sizes and errors. After an error, if
// hold is set, it holds the next puts until hold is closed.
type counting struct {
	lifecycle.Sink
	hold   chan struct{}
	mu     sync.Mutex
	sizes  []int
	errors int
}

func (c *counting) Put(ctx context.Context, batch []lifecycle.Entry) ([]lifecycle.Failure, error) {
	if _, errs := c.seen(); errs > 0 && c.hold != nil {
		<-c.hold
	}
	f, err := c.Sink.Put(ctx, batch)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sizes = append(c.sizes, len(batch))
	if err != nil {
		c.errors++
	}
	return f, err
}

func (c *counting) seen() (sizes []int, errors int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.sizes...), c.errors
}

func publisher(t *testing.T, s lifecycle.Sink, attempts int) *lifecycle.Publisher {
	t.Helper()
	p, err := lifecycle.NewPublisher(lifecycle.Config{Sink: s, Attempts: attempts, RetryBackoff: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// TestPublisher: 95 events published at once reach the target queue, each once, in PutEvents of
// at most 10 entries; Flush returns once they are on the bus.
func TestPublisher(t *testing.T) {
	b := awstest.NewEventBus(t, awstest.Name("atf-events"), atfEvents)
	c := &counting{Sink: sink(t, b)}
	p := publisher(t, c, 0)
	for i := range 95 {
		p.Publish(event(i))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sizes, _ := c.seen()
	total := 0
	for _, n := range sizes {
		if n > lifecycle.MaxBatchEntries {
			t.Fatalf("a PutEvents of %d entries", n)
		}
		total += n
	}
	if total != 95 || p.Stats().Sent != 95 {
		t.Fatalf("%d entries put in %v, stats %+v: want 95", total, sizes, p.Stats())
	}
	got := ids(t, b.Receive(t, 30*time.Second, have(95)))
	for i := range 95 {
		if id := fmt.Sprintf("echo/t%d/2", i); got[id] != 1 {
			t.Errorf("%s arrived %d times", id, got[id])
		}
	}
}

// TestPublisherRetries: events published to a bus that does not exist yet fail their puts (the
// emulator answers ResourceNotFoundException), and go once the bus is there, on a later try.
func TestPublisherRetries(t *testing.T) {
	name := awstest.Name("atf-events")
	cfg := awstest.Config(t, "EVENTBRIDGE")
	s, err := eventbus.New(eventbus.NewClient(cfg), name)
	if err != nil {
		t.Fatal(err)
	}
	c := &counting{Sink: s, hold: make(chan struct{})}
	p := publisher(t, c, 3)
	for i := range 3 {
		p.Publish(event(i))
	}
	for {
		if _, errs := c.seen(); errs > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := awstest.NewEventBus(t, name, atfEvents) // with its rule before the next try
	close(c.hold)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := ids(t, b.Receive(t, 30*time.Second, have(3)))
	if len(got) != 3 || p.Stats().Sent != 3 {
		t.Errorf("arrived %v, stats %+v: want 3 events after the failed puts", got, p.Stats())
	}
}
