package executor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// enqueued stores a task ready to be claimed.
func (s setup) enqueued(t *testing.T, id string) {
	t.Helper()
	tk, err := task.New(task.Spec{ID: id}, s.l, time.Now().UTC(), s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	enq, err := task.Enqueue(tk, tk.RunAt, s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.store.Create(context.Background(), enq); err != nil {
		t.Fatal(err)
	}
}

// TestClaimsNameLogLocation: an executor that knows where its logs are (an ECS executor's log
// group and stream) has every claim record it, so that the attempt it runs says where to look;
// one that does not records none.
func TestClaimsNameLogLocation(t *testing.T) {
	logs := &task.LogLocation{Group: "/atf/prod/executor-nap", Stream: "nap/executor/0123456789abcdef"}
	for _, tc := range []struct {
		name string
		logs *task.LogLocation
	}{{"known", logs}, {"unknown", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			ctx := context.Background()
			s.enqueued(t, "t")
			e := executor.New(s.hsc, executor.Config{Task: s.cfg, LogLocation: tc.logs})
			claimed, err := e.Claim(ctx, s.l.Name, "t", "")
			if err != nil {
				t.Fatal(err)
			}
			e.Run(ctx, s.l, worker.HandlerFunc(func(context.Context, worker.Task) (json.RawMessage, error) {
				return nil, errors.New("fails, so that its attempt is kept apart from the task")
			}), claimed)
			h, err := s.store.Attempts(ctx, s.l.Name, "t")
			if err != nil || len(h.Attempts) != 1 {
				t.Fatalf("history %+v, %v; want one attempt", h, err)
			}
			if got := h.Attempts[0].LogLocation; !reflect.DeepEqual(got, tc.logs) {
				t.Fatalf("the attempt's log location is %+v, want %+v", got, tc.logs)
			}
		})
	}
}

// TestLogHandlerOutput: an executor set to log its handlers' output logs each line a program
// writes to standard error as it comes, as a JSON line naming the task and attempt as its other
// lines about the run do, a line longer than task.MaxLogBytes in pieces of that size, and a last
// line without its newline too; the attempt's log is kept as before. One not set to (atf dev's)
// logs none of it.
func TestLogHandlerOutput(t *testing.T) {
	long := strings.Repeat("x", task.MaxLogBytes+10)
	script := filepath.Join(t.TempDir(), "h.sh")
	body := "#!/bin/sh\necho 'connecting to db' >&2\necho >&2\nprintf '%s\\n' \"$LONG\" >&2\nprintf 'no newline' >&2\necho '{\"ok\":true}'\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LONG", long)

	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint("log handler output ", on), func(t *testing.T) {
			s := newSetup(t)
			ctx := context.Background()
			s.enqueued(t, "t")
			var out bytes.Buffer
			e := executor.New(s.hsc, executor.Config{Task: s.cfg, Logger: slog.New(slog.NewJSONHandler(&out, nil)), LogHandlerOutput: on})
			claimed, err := e.Claim(ctx, s.l.Name, "t", "")
			if err != nil {
				t.Fatal(err)
			}
			e.Run(ctx, s.l, worker.Program{Path: script}, claimed)
			got, _ := s.store.Get(ctx, s.l.Name, "t")
			if got.Status != task.StatusSuccess {
				t.Fatalf("task %s (%s), want success", got.Status, got.Error)
			}
			h, err := s.store.Attempts(ctx, s.l.Name, "t")
			if err != nil || len(h.Attempts) != 1 || len(h.Attempts[0].Log) != task.MaxLogBytes || !strings.HasSuffix(h.Attempts[0].Log, "x\nno newline") {
				t.Fatalf("%d attempts, %v; want one, whose log is the last %d bytes of the output", len(h.Attempts), err, task.MaxLogBytes)
			}

			var lines []string
			sc := bufio.NewScanner(&out)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var rec struct {
					Msg, Lambda, Line string
					TaskID            string `json:"task_id"`
					Attempt           int
				}
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					t.Fatalf("log line %q: %v", sc.Text(), err)
				}
				if rec.Msg != "handler output" {
					continue
				}
				if rec.Lambda != s.l.Name || rec.TaskID != "t" || rec.Attempt != 1 {
					t.Errorf("handler output logged as %s", sc.Text())
				}
				lines = append(lines, rec.Line)
			}
			want := []string{"connecting to db", long[:task.MaxLogBytes], long[task.MaxLogBytes:], "no newline"}
			if !on {
				want = nil
			}
			if !reflect.DeepEqual(lines, want) {
				t.Fatalf("logged %d lines of handler output %.80q; want %d: %.80q", len(lines), lines, len(want), want)
			}
		})
	}
}

// TestLogHandlerOutputCutLines: a line written in several pieces is logged once, whole, and
// whatever the handler writes after it returned (a killed program's output, copied late) is
// logged as it comes.
func TestLogHandlerOutputCutLines(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	s.enqueued(t, "t")
	var out bytes.Buffer
	e := executor.New(s.hsc, executor.Config{Task: s.cfg, Logger: slog.New(slog.NewJSONHandler(&out, nil)), LogHandlerOutput: true})
	claimed, err := e.Claim(ctx, s.l.Name, "t", "")
	if err != nil {
		t.Fatal(err)
	}
	var late io.Writer
	e.Run(ctx, s.l, worker.HandlerFunc(func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
		w := worker.LogOf(ctx)
		for _, piece := range []string{"one ", "line\r\ntw", "o lines\n"} {
			fmt.Fprint(w, piece)
		}
		late = w
		return nil, nil
	}), claimed)
	fmt.Fprint(late, "after")
	for _, want := range []string{`"line":"one line"`, `"line":"two lines"`, `"line":"after"`} {
		if n := strings.Count(out.String(), want); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", want, n, out.String())
		}
	}
}
