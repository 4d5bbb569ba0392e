package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
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

// mainEnv makes the test binary, started again by TestMainKeepsPrintsOutOfResult, a Go worker
// program (worker.Main) whose handler prints to standard output, logs, and returns a result.
const mainEnv = "ATF_TEST_WORKER_MAIN"

// TestMainKeepsPrintsOutOfResult: what a Go handler run by worker.Main prints to standard output
// goes to its log, beside its slog and log output, and its result is what it returned: standard
// output carries the result alone.
func TestMainKeepsPrintsOutOfResult(t *testing.T) {
	if os.Getenv(mainEnv) == "1" {
		worker.Main(worker.HandlerFunc(func(_ context.Context, tk worker.Task) (json.RawMessage, error) {
			fmt.Println("processing", tk.ID)
			fmt.Fprintln(os.Stdout, "still processing")
			slog.Info("half way")
			log.Print("nearly done")
			return json.RawMessage(`{"greeting":"hello"}`), nil
		}))
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := script(t, "go-handler", mainEnv+`=1 exec '`+exe+`' -test.run='^TestMainKeepsPrintsOutOfResult$'`)
	l := worker.NewLog()
	res, err := worker.Program{Path: h}.Handle(worker.WithLog(context.Background(), l), sample)
	if err != nil || string(res) != `{"greeting":"hello"}` {
		t.Fatalf("result %s, %v; want {\"greeting\":\"hello\"} alone (log %q)", res, err, l.String())
	}
	for _, line := range []string{"processing t-1", "still processing", "half way", "nearly done"} {
		if !strings.Contains(l.String(), line) {
			t.Errorf("log %q lacks %q", l.String(), line)
		}
	}
}
