package executor

import (
	"bytes"
	"log/slog"
	"sync"

	"github.com/openatf/atf/shared/task"
)

// handlerLines logs each line a handler writes to its attempt's log (Config.LogHandlerOutput),
// with a logger that names the task and attempt. A line longer than task.MaxLogBytes is logged
// in pieces of that size, so what it holds is bounded however long a line runs. It is safe for
// concurrent use.
type handlerLines struct {
	log *slog.Logger

	mu      sync.Mutex
	partial []byte // the line written so far, without its newline
	closed  bool   // the handler returned: a line is logged as it comes, ended or not
}

// Write logs the lines p ends, and keeps the rest for the next Write or close.
func (h *handlerLines) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		line, rest, ended := bytes.Cut(p, []byte{'\n'})
		take := min(len(line), task.MaxLogBytes-len(h.partial))
		h.partial = append(h.partial, line[:take]...)
		if take < len(line) { // the piece is full: log it, and go on with the line
			h.flush()
			p = p[take:]
			continue
		}
		if ended {
			h.flush()
		}
		p = rest
	}
	if h.closed {
		h.flush() // written after the handler returned (a killed program's last words)
	}
	return n, nil
}

// close logs the line left without its newline, if any: the handler returned.
func (h *handlerLines) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.flush()
}

func (h *handlerLines) flush() {
	line := bytes.TrimSuffix(h.partial, []byte{'\r'})
	if len(line) > 0 {
		h.log.Info("handler output", "line", string(line))
	}
	h.partial = h.partial[:0]
}
