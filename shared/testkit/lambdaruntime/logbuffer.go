package lambdaruntime

import (
	"bytes"
	"sync"
)

// LogBuffer keeps what functions log (Function.Logs), safe for the writes of their processes'
// output from several goroutines at once.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
