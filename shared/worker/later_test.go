package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/worker"
)

// TestProgramAsksLater: a program that exits ExitRetry and prints a LaterOutput on stdout asks
// to run again after its delay: snoozed, or retried then with its stderr tail as the error. Any
// other stdout leaves the exit a plain retriable failure, as before.
func TestProgramAsksLater(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		later      *worker.Later // nil: a plain retriable failure
		errHas     string
	}{
		{name: "snooze", body: `echo '{"snooze": "5m"}'; exit 75`, later: &worker.Later{Delay: 5 * time.Minute}},
		{name: "retry after", body: `echo '{"retry_after":"30s"}'; echo "rate limited" >&2; exit 75`,
			later: &worker.Later{Delay: 30 * time.Second, Counted: true}, errHas: "rate limited"},
		{name: "other stdout", body: `echo '{"snooze": "5m", "other": 1}'; echo busy >&2; exit 75`, errHas: "busy"},
		{name: "both", body: `echo '{"snooze": "5m", "retry_after": "1s"}'; echo busy >&2; exit 75`, errHas: "busy"},
		{name: "two objects", body: `echo '{"snooze": "5m"} {}'; echo busy >&2; exit 75`, errHas: "busy"},
		{name: "text", body: `echo 'snooze 5m'; echo busy >&2; exit 75`, errHas: "busy"},
		{name: "bad duration", body: `echo '{"snooze": "soon"}'; echo busy >&2; exit 75`, errHas: `snooze "soon", which is not a Go duration`},
	} {
		path := script(t, strings.ReplaceAll(tc.name, " ", "-"), tc.body)
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := worker.Program{Path: path}.Handle(context.Background(), sample)
			if err == nil || !worker.Retriable(err) || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("error %v; want a retriable one with %q", err, tc.errHas)
			}
			later, ok := worker.LaterOf(err)
			if tc.later == nil {
				if ok {
					t.Fatalf("asks to run again after %s; want a plain retriable failure", later.Delay)
				}
				return
			}
			if !ok || later.Delay != tc.later.Delay || later.Counted != tc.later.Counted {
				t.Fatalf("LaterOf: %+v, %v; want %+v", later, ok, tc.later)
			}
		})
	}
}

// TestProgramExitsOnlyAsBefore: a program that prints a LaterOutput but exits 0 succeeded with
// it as its result, and one that exits 1 failed fatally: only ExitRetry reads it.
func TestProgramExitsOnlyAsBefore(t *testing.T) {
	t.Parallel()
	ok, fatal := script(t, "ok", `echo '{"snooze": "5m"}'`), script(t, "fatal", `echo '{"snooze": "5m"}'; exit 1`)
	if res, err := (worker.Program{Path: ok}).Handle(context.Background(), sample); err != nil || string(res) != `{"snooze":"5m"}` {
		t.Errorf("exit 0: %s, %v; want the output as the result", res, err)
	}
	if _, err := (worker.Program{Path: fatal}).Handle(context.Background(), sample); err == nil || worker.Retriable(err) {
		t.Errorf("exit 1: %v; want a fatal failure", err)
	}
}

// TestLaterErrors: Snooze and RetryAfter read back with LaterOf through wrapping; a fatal error
// wins over a RetryAfter; RetryAfter's error is the task's.
func TestLaterErrors(t *testing.T) {
	cause := errors.New("429 from upstream")
	err := worker.RetryAfter(time.Minute, cause)
	if l, ok := worker.LaterOf(err); !ok || l.Delay != time.Minute || !l.Counted || err.Error() != cause.Error() || !errors.Is(err, cause) {
		t.Errorf("RetryAfter: %+v, %v, %q; want counted, after 1m, the cause's text", l, ok, err)
	}
	if l, ok := worker.LaterOf(wrap(worker.Snooze(time.Second))); !ok || l.Delay != time.Second || l.Counted {
		t.Errorf("wrapped Snooze: %+v, %v; want not counted, after 1s", l, ok)
	}
	if _, ok := worker.LaterOf(worker.RetryAfter(time.Minute, worker.Fatal(cause))); ok {
		t.Error("RetryAfter of a fatal error asks to run again; want fatal")
	}
	if _, ok := worker.LaterOf(cause); ok {
		t.Error("a plain error asks to run again later")
	}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return "call: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

func wrap(err error) error { return wrapped{err} }
