package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// TestProgramLog: a Program's standard error is its attempt's log, whether it succeeds or fails,
// and the log keeps its last task.MaxLogBytes; its result is its standard output alone.
func TestProgramLog(t *testing.T) {
	t.Parallel()
	ok := script(t, "ok", `echo "processing t-1" >&2; echo '{"done":true}'`)
	noisy := script(t, "noisy", `i=0; while [ $i -lt 3000 ]; do echo "noise line $i" >&2; i=$((i+1)); done; echo "last line" >&2; exit 75`)

	l := worker.NewLog()
	res, err := worker.Program{Path: ok}.Handle(worker.WithLog(context.Background(), l), sample)
	if err != nil || string(res) != `{"done":true}` || l.String() != "processing t-1\n" {
		t.Fatalf("got %s, %v, log %q; want the result, and the stderr line as the log", res, err, l.String())
	}

	l = worker.NewLog()
	_, err = worker.Program{Path: noisy}.Handle(worker.WithLog(context.Background(), l), sample)
	if err == nil || !worker.Retriable(err) {
		t.Fatalf("got %v, want a retriable error", err)
	}
	if got := l.String(); len(got) != task.MaxLogBytes || !strings.HasSuffix(got, "noise line 2999\nlast line\n") {
		t.Fatalf("log is %d bytes ending %q; want the last %d bytes", len(got), got[max(len(got)-40, 0):], task.MaxLogBytes)
	}

	// Without a log in its context a Program runs all the same.
	if res, err := (worker.Program{Path: ok}).Handle(context.Background(), sample); err != nil || string(res) != `{"done":true}` {
		t.Fatalf("without a log: %s, %v", res, err)
	}
}
