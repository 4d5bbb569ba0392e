package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// TestHandlerAsksLater: a handler's worker.Snooze and worker.RetryAfter are reported as such,
// with their delay, and the task waits that long; a fatal error wins over them, and a delay out
// of bounds is a retriable failure that says why.
func TestHandlerAsksLater(t *testing.T) {
	hour := time.Hour
	for _, tc := range []struct {
		name     string
		err      error
		outcome  status.Outcome
		delay    *time.Duration // reported
		status   task.Status
		attempts int
		says     string // in the task's error
	}{
		{"snooze", worker.Snooze(time.Hour), status.Snoozed, &hour, task.StatusNew, 0, ""},
		{"retry after", worker.RetryAfter(time.Hour, errors.New("429")), status.Retriable, &hour, task.StatusRetriableFailure, 1, "429"},
		{"wrapped", fmt.Errorf("call: %w", worker.RetryAfter(time.Hour, nil)), status.Retriable, &hour, task.StatusRetriableFailure, 1, "call: retry after 1h0m0s"},
		{"fatal wins", worker.RetryAfter(time.Hour, worker.Fatal(errors.New("bad"))), status.Fatal, nil, task.StatusFatalFailure, 1, "bad"},
		{"out of bounds", worker.Snooze(-time.Second), status.Retriable, nil, task.StatusRetriableFailure, 1, "within 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			ctx := context.Background()
			tk, _ := task.New(task.Spec{ID: "t"}, s.l, time.Now().UTC(), s.cfg)
			if err := s.store.Create(ctx, tk); err != nil {
				t.Fatal(err)
			}
			claimed := s.claimNext(t, "t")
			rec := &recordedResults{Status: s.hsc}
			before := time.Now()
			s.executor(t, rec).Run(ctx, s.l, worker.HandlerFunc(
				func(context.Context, worker.Task) (json.RawMessage, error) { return nil, tc.err }), claimed)
			after := time.Now()
			if len(rec.results) != 1 {
				t.Fatalf("reported %d results, want 1", len(rec.results))
			}
			r := rec.results[0]
			if r.Outcome != tc.outcome || (r.Delay == nil) != (tc.delay == nil) || (r.Delay != nil && *r.Delay != *tc.delay) {
				t.Errorf("reported %s after %v, want %s after %v", r.Outcome, r.Delay, tc.outcome, tc.delay)
			}
			got, _ := s.store.Get(ctx, s.l.Name, "t")
			if got.Status != tc.status || got.Attempts != tc.attempts || !strings.Contains(got.Error, tc.says) {
				t.Fatalf("task %s, %d attempts, error %q; want %s, %d, saying %q", got.Status, got.Attempts, got.Error, tc.status, tc.attempts, tc.says)
			}
			if tc.delay != nil && (got.NextTriggerAt.Before(before.Add(*tc.delay)) || got.NextTriggerAt.After(after.Add(*tc.delay))) {
				t.Errorf("due %v, want %s after the run ended", got.NextTriggerAt, *tc.delay)
			}
		})
	}
}
