package lifecycle

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// WriterSink writes each entry as one line of JSON, shaped as EventBridge delivers an event to a
// rule's target (version, id, detail-type, source, time, detail): `atf dev --events stdout`.
type WriterSink struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriterSink returns a sink writing to w.
func NewWriterSink(w io.Writer) *WriterSink { return &WriterSink{w: w} }

// envelope is an event as a rule's target receives it.
type envelope struct {
	Version    string          `json:"version"`
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Time       string          `json:"time"`
	Resources  []string        `json:"resources"`
	Detail     json.RawMessage `json:"detail"`
}

// Put writes the batch, one line an entry.
func (s *WriterSink) Put(_ context.Context, batch []Entry) ([]Failure, error) {
	var buf []byte
	for _, e := range batch {
		var id struct {
			ID string `json:"event_id"`
		}
		_ = json.Unmarshal(e.Detail, &id) // locally the bus's id is the event's own
		line, err := json.Marshal(envelope{Version: "0", ID: id.ID, DetailType: e.DetailType, Source: Source,
			Time: e.Time.UTC().Format(time.RFC3339), Resources: []string{}, Detail: e.Detail})
		if err != nil {
			return nil, err
		}
		buf = append(append(buf, line...), '\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.w.Write(buf)
	return nil, err
}

// FlushAfter returns handler (a function's handler, as lambda.Start takes it) flushing p after
// each invocation, for at most timeout (and within the invocation's own deadline): AWS Lambda
// freezes the process once the handler returns, senders and all. The events go out while the
// handler runs, as its writes publish them; the flush waits only for those still in flight. An
// event the flush did not see out goes when the process next runs, or is lost with it (see
// docs/guarantees.md). With a nil p, or a timeout of 0, it returns handler.
func FlushAfter[In, Out any](handler func(context.Context, In) (Out, error), p *Publisher, timeout time.Duration) func(context.Context, In) (Out, error) {
	if p == nil || timeout <= 0 {
		return handler
	}
	return func(ctx context.Context, in In) (Out, error) {
		out, err := handler(ctx, in)
		flush(ctx, p, timeout)
		return out, err
	}
}

// FlushAfterErr is FlushAfter for a handler that returns only an error.
func FlushAfterErr[In any](handler func(context.Context, In) error, p *Publisher, timeout time.Duration) func(context.Context, In) error {
	if p == nil || timeout <= 0 {
		return handler
	}
	return func(ctx context.Context, in In) error {
		err := handler(ctx, in)
		flush(ctx, p, timeout)
		return err
	}
}

func flush(ctx context.Context, p *Publisher, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout) // within the invocation's deadline
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		p.cfg.Logger.Warn("lifecycle events left for the function's next run", "err", err)
	}
}
