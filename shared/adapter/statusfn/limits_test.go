package statusfn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// lambdaInvokeLimit is the request size Lambda refuses above, as its error states it:
// "Request must be smaller than 6291556 bytes for the InvokeFunction operation".
const lambdaInvokeLimit = 6291556

// sizeLimited refuses what Lambda refuses: a request over its invoke limit never reaches the
// function. It remembers the largest request it was given.
type sizeLimited struct {
	statusfn.Invoker
	largest atomic.Int64
}

func (s *sizeLimited) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	if n := int64(len(payload)); n > s.largest.Load() {
		s.largest.Store(n)
	}
	if len(payload) > lambdaInvokeLimit {
		return nil, fmt.Errorf("RequestEntityTooLargeException: Request must be smaller than %d bytes for the InvokeFunction operation", lambdaInvokeLimit)
	}
	return s.Invoker.Invoke(ctx, payload)
}

// bigJSON is a JSON string of n bytes.
func bigJSON(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
}

// TestOversizedRunEndsFatal: a Go handler that returns a result or an error larger than Lambda's
// invoke limit ends its task as a fatal failure that says why, at its first run. Sent as it is,
// the status call would fail, and the task would run again until dead as "worker was lost".
func TestOversizedRunEndsFatal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		result json.RawMessage
		err    error
		want   string // in the task's error
	}{
		{"result", bigJSON(7 << 20), nil, "result is 7340032 bytes; the limit is 262144"},
		{"error", nil, worker.Fatal(errors.New(strings.Repeat("e", 7<<20))), "eeee"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			inv := &sizeLimited{Invoker: statusfn.LocalInvoker{Handler: e.h}}
			c := statusfn.NewClient(inv)
			ctx := context.Background()
			e.fixture(t, "t1", task.StatusEnqueued, "")
			x := executor.New(c, executor.Config{Task: task.Config{HeartbeatInterval: time.Hour, HeartbeatTimeout: 6 * time.Hour}, Logger: slog.New(slog.DiscardHandler)})
			claimed, err := x.Claim(ctx, "echo", "t1", "")
			if err != nil {
				t.Fatal(err)
			}
			h := worker.HandlerFunc(func(context.Context, worker.Task) (json.RawMessage, error) { return tc.result, tc.err })
			x.Run(ctx, echo, h, claimed)
			got := e.get(t, "t1")
			if got.Status != task.StatusFatalFailure || !strings.Contains(got.Error, tc.want) || got.Result != nil {
				t.Errorf("after the run: status %s, error %.100q, result of %d bytes; want fatal_failure naming %q", got.Status, got.Error, len(got.Result), tc.want)
			}
			if n := inv.largest.Load(); n > statusfn.MaxRequestBytes {
				t.Errorf("the client sent a request of %d bytes, over %d", n, statusfn.MaxRequestBytes)
			}
		})
	}
}

// TestClientRefusesOversizedRequest: a result too large for the invocation, as with a payload
// limit configured above Lambda's, is never sent; the Client reports a fatal failure that says so.
func TestClientRefusesOversizedRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	inv := &sizeLimited{Invoker: statusfn.LocalInvoker{Handler: e.h}}
	c := statusfn.NewClient(inv)
	e.fixture(t, "t1", task.StatusProcessing, eventLease)
	got, err := c.SetResult(context.Background(), "echo", "t1", eventLease, status.Result{Outcome: status.Success, Result: bigJSON(statusfn.MaxRequestBytes)})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != task.StatusFatalFailure || !strings.Contains(got.Error, "result is too large for the status call") {
		t.Errorf("status %s, error %q; want fatal_failure, the result too large for the status call", got.Status, got.Error)
	}
	if n := inv.largest.Load(); n > statusfn.MaxRequestBytes {
		t.Errorf("the client sent a request of %d bytes, over %d", n, statusfn.MaxRequestBytes)
	}
}
