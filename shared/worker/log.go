package worker

import (
	"context"
	"io"
	"strings"
	"sync"

	"github.com/openatf/atf/shared/task"
)

// Log keeps the last task.MaxLogBytes a handler writes during one attempt: the attempt's log
// (task.Attempt.Log). The executor gives each run one, through the handler's context (WithLog);
// a Program writes its standard error there. It is safe for concurrent use.
type Log struct {
	mu   sync.Mutex
	tail tailBuffer
	also io.Writer // gets all that is written as well, if not nil (NewLogTo)
}

// NewLog returns an empty Log.
func NewLog() *Log { return &Log{tail: tailBuffer{limit: task.MaxLogBytes}} }

// NewLogTo returns an empty Log that also passes all that is written to it on to w, in order:
// an executor whose store keeps no attempt logs sends them to its own log this way.
func NewLogTo(w io.Writer) *Log {
	l := NewLog()
	l.also = w
	return l
}

// Write keeps the last task.MaxLogBytes of all that was written, and passes p on (NewLogTo).
// What it passes on cannot fail the handler: an error there is not returned.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.also != nil {
		_, _ = l.also.Write(p)
	}
	return l.tail.Write(p)
}

// String is the log kept, as valid UTF-8: a character cut by the bound is left out.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.ToValidUTF8(string(l.tail.buf), "")
}

type logKey struct{}

// WithLog returns ctx carrying l, the log of the attempt that runs under it.
func WithLog(ctx context.Context, l *Log) context.Context {
	return context.WithValue(ctx, logKey{}, l)
}

// LogOf is where a handler run under ctx writes its attempt's log (WithLog): a Go handler run in
// the executor's process may write there too. io.Discard if ctx carries none.
func LogOf(ctx context.Context) io.Writer {
	if l, ok := ctx.Value(logKey{}).(*Log); ok && l != nil {
		return l
	}
	return io.Discard
}
