package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Entry is one event as a sink sends it.
type Entry struct {
	DetailType string
	Detail     json.RawMessage // the Event, as JSON
	Time       time.Time
}

// Size is the size EventBridge counts for e against a PutEvents request's limit (MaxBatchBytes):
// its source, detail-type and detail, and 14 bytes for its time.
func (e Entry) Size() int { return len(Source) + len(e.DetailType) + len(e.Detail) + 14 }

// Failure is an entry of a batch that a sink could not put.
type Failure struct {
	Index         int // in the batch
	Code, Message string
	// Retriable says whether putting it again may succeed (a throttle, an internal error), as
	// opposed to an entry the bus refuses.
	Retriable bool
}

// Sink puts a batch of entries on a bus: at most MaxBatchEntries, at most MaxBatchBytes. An error
// means the whole batch failed (and may be put again); otherwise the entries not in failures
// were put.
type Sink interface {
	Put(ctx context.Context, batch []Entry) (failures []Failure, err error)
}

// PutEvents' limits: entries per request, and their total size.
const (
	MaxBatchEntries = 10
	MaxBatchBytes   = 256 << 10
)

// Publisher defaults; Config documents each.
const (
	DefaultBuffer       = 10000
	DefaultSenders      = 4
	DefaultAttempts     = 4
	DefaultPutTimeout   = 5 * time.Second
	DefaultRetryBackoff = 100 * time.Millisecond
	// DefaultFlushTimeout bounds the wait FlushAfter adds to an invocation for the events it
	// has not sent yet.
	DefaultFlushTimeout = time.Second
)

// Config configures a Publisher.
type Config struct {
	Sink Sink // required
	// Buffer is how many events may wait to be sent [DefaultBuffer]. Publish drops an event that
	// finds it full (Stats.Dropped, and a warning in the log) rather than slow the task path.
	Buffer int
	// Senders is how many batches are put at once [DefaultSenders].
	Senders int
	// Attempts is how many times an entry is put before it is given up (Stats.Failed)
	// [DefaultAttempts]; the waits between them double from RetryBackoff [DefaultRetryBackoff].
	Attempts     int
	RetryBackoff time.Duration
	// PutTimeout bounds each Put [DefaultPutTimeout].
	PutTimeout time.Duration
	Logger     *slog.Logger // [slog.Default()]
}

// WithDefaults returns c with every zero field at its default.
func (c Config) WithDefaults() Config {
	if c.Buffer <= 0 {
		c.Buffer = DefaultBuffer
	}
	if c.Senders <= 0 {
		c.Senders = DefaultSenders
	}
	if c.Attempts <= 0 {
		c.Attempts = DefaultAttempts
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.PutTimeout <= 0 {
		c.PutTimeout = DefaultPutTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Stats count a Publisher's events.
type Stats struct {
	Published int64 // handed to Publish
	Sent      int64 // put on the bus
	Dropped   int64 // refused by Publish: the buffer was full, or the publisher closed
	Failed    int64 // given up: refused by the bus, or still failing after Attempts puts
}

// Publisher sends events to a Sink in batches, from goroutines of its own: Publish only appends
// to a bounded buffer. The batches are put as soon as a sender is free, with what the buffer
// holds then (up to MaxBatchEntries), so an event waits for no timer; under load the batches
// fill. A nil *Publisher publishes nothing. Close it to stop its senders.
type Publisher struct {
	cfg   Config
	queue chan Event
	stop  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	pending int             // published, not yet sent or given up
	idle    []chan struct{} // Flush calls waiting for pending to reach zero
	closed  bool

	published, sent, dropped, failed atomic.Int64
}

// NewPublisher starts a publisher.
func NewPublisher(c Config) (*Publisher, error) {
	c = c.WithDefaults()
	if c.Sink == nil {
		return nil, errors.New("lifecycle: Config.Sink is required")
	}
	p := &Publisher{cfg: c, queue: make(chan Event, c.Buffer), stop: make(chan struct{})}
	for range c.Senders {
		p.wg.Go(p.send)
	}
	return p, nil
}

// Publish takes e to send. It never blocks: if the buffer is full, or the publisher is closed, e
// is dropped, counted and logged.
func (p *Publisher) Publish(e Event) {
	if p == nil {
		return
	}
	p.published.Add(1)
	// The append happens under the lock (it never blocks), so that Close, which takes the lock
	// to close, finds every event published before it in the buffer.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.drop(e, "the publisher is closed")
		return
	}
	select {
	case p.queue <- e:
		p.pending++
		p.mu.Unlock()
	default:
		p.mu.Unlock()
		p.drop(e, "the buffer is full")
	}
}

func (p *Publisher) drop(e Event, why string) {
	// Log the first drop of a run of them and every thousandth, not each.
	if n := p.dropped.Add(1); n == 1 || n%1000 == 0 {
		p.cfg.Logger.Warn("lifecycle event dropped: "+why, "event_id", e.ID, "type", string(e.Type), "dropped", n)
	}
}

// Flush waits until every event published before it has been sent or given up, or ctx is done.
// Events published meanwhile are waited for too: call it once the events of interest are
// published, as when a function's invocation ends (FlushAfter).
func (p *Publisher) Flush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.pending == 0 {
		p.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	p.idle = append(p.idle, ch)
	left := p.pending
	p.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lifecycle: %d events not sent yet: %w", left, ctx.Err())
	}
}

// Close flushes (until ctx is done), then stops the senders. Events still unsent are dropped and
// counted; later Publish calls drop theirs. A second Close does nothing.
func (p *Publisher) Close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.Flush(ctx)
	close(p.stop)
	p.wg.Wait()
	for {
		select {
		case e := <-p.queue:
			p.done(1)
			p.drop(e, "the publisher closed before sending it")
		default:
			return err
		}
	}
}

// Stats returns the counts so far.
func (p *Publisher) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	return Stats{Published: p.published.Load(), Sent: p.sent.Load(), Dropped: p.dropped.Load(), Failed: p.failed.Load()}
}

func (p *Publisher) done(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending -= n
	if p.pending == 0 {
		for _, ch := range p.idle {
			close(ch)
		}
		p.idle = nil
	}
}

// send puts batches until the publisher stops: it waits for one event, then takes what else the
// buffer holds, up to a batch.
func (p *Publisher) send() {
	for {
		var batch []Event
		select {
		case e := <-p.queue:
			batch = append(batch, e)
		case <-p.stop:
			return
		}
	fill:
		for len(batch) < MaxBatchEntries {
			select {
			case e := <-p.queue:
				batch = append(batch, e)
			default:
				break fill
			}
		}
		p.deliver(batch)
	}
}

// deliver puts events, split into batches within PutEvents' limits, and counts each as sent or
// failed.
func (p *Publisher) deliver(events []Event) {
	defer p.done(len(events))
	var batch []Entry
	size := 0
	for _, e := range events {
		detail, err := json.Marshal(e)
		if err != nil { // an Event always marshals; count it rather than lose it silently
			p.fail(1, "marshal", err.Error())
			continue
		}
		en := Entry{DetailType: e.Type.DetailType(), Detail: detail, Time: e.Time}
		if en.Size() > MaxBatchBytes {
			p.fail(1, "too large", fmt.Sprintf("event %s is %d bytes, over the bus's %d", e.ID, en.Size(), MaxBatchBytes))
			continue
		}
		if len(batch) == MaxBatchEntries || size+en.Size() > MaxBatchBytes {
			p.put(batch)
			batch, size = nil, 0
		}
		batch = append(batch, en)
		size += en.Size()
	}
	if len(batch) > 0 {
		p.put(batch)
	}
}

// put puts one batch, putting again what failed retriably, up to Attempts times.
func (p *Publisher) put(batch []Entry) {
	wait := p.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PutTimeout)
		failures, err := p.cfg.Sink.Put(ctx, batch)
		cancel()
		var retry []Entry
		var code, msg string
		if err != nil {
			retry, code, msg = batch, "put", err.Error()
		} else {
			p.sent.Add(int64(len(batch) - len(failures)))
			for _, f := range failures {
				if f.Index < 0 || f.Index >= len(batch) {
					continue
				}
				code, msg = f.Code, f.Message
				if !f.Retriable {
					p.fail(1, f.Code, f.Message)
					continue
				}
				retry = append(retry, batch[f.Index])
			}
		}
		if len(retry) == 0 {
			return
		}
		if attempt == p.cfg.Attempts {
			p.fail(len(retry), code, msg)
			return
		}
		select {
		case <-time.After(wait):
		case <-p.stop:
			p.fail(len(retry), code, msg+" (the publisher closed before another try)")
			return
		}
		wait *= 2
		batch = retry
	}
}

func (p *Publisher) fail(n int, code, msg string) {
	total := p.failed.Add(int64(n))
	p.cfg.Logger.Warn("lifecycle events lost: the bus did not take them", "events", n, "code", code, "err", msg, "failed", total)
}
