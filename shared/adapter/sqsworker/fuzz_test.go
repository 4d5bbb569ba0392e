package sqsworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// FuzzHandle feeds the worker function arbitrary SQS events: the event JSON as the Lambda runtime
// decodes it, plus one more record with an arbitrary body (so bodies are fuzzed directly, not only
// through the event's JSON). The status controller is a stand-in that answers a claim by the task
// id: "run..." is claimed and runs, "gone..." is not found, "dup..." conflicts, "down..." fails
// as an unreachable function would, and any other id is not found. With late set, the invocation
// has less than the margin left. Whatever the event:
//   - Handle never panics and never returns an error;
//   - a record whose body is not a task message of this lambda with a task id is failed, never
//     claimed;
//   - every other record is claimed once, and failed exactly when its claim failed otherwise than
//     with not found or conflict; or, when late, failed and not claimed;
//   - batchItemFailures holds the message ids of the failed records, in the batch's order.
func FuzzHandle(f *testing.F) {
	f.Add([]byte(`{"Records":[{"messageId":"m1","body":"{\"lambda\":\"echo\",\"priority\":\"normal\",\"task_id\":\"run-1\",\"attempt\":0}","attributes":{"ApproximateReceiveCount":"1"}}]}`), `{"lambda":"echo","task_id":"down-1"}`, false)
	f.Add([]byte(`{"Records":[{"messageId":"m1","body":"{\"lambda\":\"echo\",\"task_id\":\"dup-1\"}"},{"messageId":"m1","body":"{\"lambda\":\"echo\",\"task_id\":\"dup-1\"}"}]}`), `{"lambda":"echo","task_id":"gone-1"}`, false)
	f.Add([]byte(`{"Records":[{"messageId":"m1","body":"{\"lambda\":\"echo\",\"task_id\":\"run-1\"}"}]}`), `{"lambda":"echo","task_id":"run-2"}`, true)
	f.Add([]byte(`{"Records":null}`), `{"lambda":"echo","task_id":""}`, false)
	f.Add([]byte(`{}`), `{"lambda":"Echo","task_id":"run-1"}`, false)
	f.Add([]byte(`[]`), `{"lambda":"echo","task_id":"run-1","attempt":"1"}`, false)
	f.Add([]byte(`{"Records":[{"body":""}]}`), `null`, false)
	f.Add([]byte(`{"Records":[{"messageId":"","body":"{\"lambda\":\"echo\",\"task_id\":\"x\"} trailing"}]}`), `{"lambda":"echo","task_id":"run-1"}{}`, false)

	f.Fuzz(func(t *testing.T, event []byte, body string, late bool) {
		var e events.SQSEvent
		// As the Lambda runtime decodes its event; an event it cannot decode never reaches Handle.
		if json.NewDecoder(bytes.NewReader(event)).Decode(&e) != nil {
			e = events.SQSEvent{}
		}
		e.Records = append(e.Records, events.SQSMessage{MessageId: "fuzz-extra", Body: body,
			Attributes: map[string]string{"ApproximateReceiveCount": "1"}})

		st := &fakeStatus{}
		h, err := sqsworker.New(sqsworker.Config{
			Lambda:  task.Lambda{Name: "echo", Concurrency: 3, Timeout: time.Minute},
			Handler: worker.HandlerFunc(func(ctx context.Context, t worker.Task) (json.RawMessage, error) { return t.Payload, nil }),
			Status:  st, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if late {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, sqsworker.DefaultMargin-time.Minute)
			defer cancel()
		}
		resp, err := h.Handle(ctx, e)
		if err != nil {
			t.Fatalf("Handle returned an error: %v", err)
		}

		var wantFailed, wantClaims []string
		for _, r := range e.Records {
			id, ok := taskMessage(r.Body)
			switch {
			case !ok || late:
				wantFailed = append(wantFailed, r.MessageId)
			case strings.HasPrefix(id, "down"):
				wantClaims = append(wantClaims, id)
				wantFailed = append(wantFailed, r.MessageId)
			default:
				wantClaims = append(wantClaims, id)
			}
		}
		var failed []string
		for _, f := range resp.BatchItemFailures {
			failed = append(failed, f.ItemIdentifier)
		}
		if !slices.Equal(failed, wantFailed) {
			t.Errorf("failed %q, want %q", failed, wantFailed)
		}
		// Records run at once, so claims come in any order.
		claims := st.claimed()
		slices.Sort(claims)
		slices.Sort(wantClaims)
		if !slices.Equal(claims, wantClaims) {
			t.Errorf("claimed %q, want %q", claims, wantClaims)
		}
		if runs := st.results(); runs != countPrefix(wantClaims, "run") {
			t.Errorf("%d results reported for claims %q", runs, wantClaims)
		}
	})
}

// taskMessage reports whether body is a task message of lambda echo that names a task, and its
// task id.
func taskMessage(body string) (string, bool) {
	var m task.Message
	if err := json.Unmarshal([]byte(body), &m); err != nil || m.Lambda != "echo" || m.TaskID == "" {
		return "", false
	}
	return m.TaskID, true
}

func countPrefix(ids []string, prefix string) int {
	n := 0
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			n++
		}
	}
	return n
}

// fakeStatus answers by task id: see FuzzHandle.
type fakeStatus struct {
	mu     sync.Mutex
	claims []string
	done   int
}

func (s *fakeStatus) claimed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.claims)
}

func (s *fakeStatus) results() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

func (s *fakeStatus) Claim(ctx context.Context, lambda, id, _, _ string) (task.Task, error) {
	s.mu.Lock()
	s.claims = append(s.claims, id)
	s.mu.Unlock()
	if lambda != "echo" {
		return task.Task{}, errors.New("claim for lambda " + lambda)
	}
	switch {
	case strings.HasPrefix(id, "run"):
		return task.Task{ID: id, Lambda: lambda, Priority: "normal", Status: task.StatusProcessing, Attempts: 1, Lease: "L"}, nil
	case strings.HasPrefix(id, "dup"):
		return task.Task{}, task.Errorf(task.ErrConflict, "task %s is claimed", id)
	case strings.HasPrefix(id, "down"):
		return task.Task{}, errors.New("status function unreachable")
	}
	return task.Task{}, task.Errorf(task.ErrNotFound, "task %s not found", id)
}

func (s *fakeStatus) Heartbeat(ctx context.Context, lambda, id, lease string) error { return nil }

func (s *fakeStatus) SetResult(ctx context.Context, lambda, id, lease string, r status.Result) (task.Task, error) {
	s.mu.Lock()
	s.done++
	s.mu.Unlock()
	return task.Task{ID: id, Lambda: lambda, Status: task.StatusSuccess}, nil
}

func (s *fakeStatus) Release(ctx context.Context, lambda, id, lease string) error { return nil }

func (s *fakeStatus) Unclaim(ctx context.Context, lambda, id, delivery, token string) error {
	return nil
}
