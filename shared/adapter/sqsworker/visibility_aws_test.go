package sqsworker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
	"github.com/openatf/atf/shared/worker"
)

// TestFailedRecordVisibleAgainSoon, on SQS: the message of a record whose claim failed is
// received again within a long poll, although the queue hides a received message for ten
// minutes.
func TestFailedRecordVisibleAgainSoon(t *testing.T) {
	t.Parallel()
	cfg := awstest.Config(t, "SQS")
	prefix := awstest.Name("atfw")
	awstest.Cleanup(t, prefix)
	q, err := sqsqueue.New(sqs.NewFromConfig(cfg), sqsqueue.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	must(t, err)
	ctx := t.Context()
	must(t, q.Create(ctx, echo))
	msg := task.Message{Lambda: echo.Name, Priority: "normal", TaskID: "flaky-claim"}
	must(t, q.Send(ctx, msg))
	recv := func(wait time.Duration) []task.Delivery {
		t.Helper()
		ds, err := q.Receive(ctx, task.ReceiveParams{Lambda: echo.Name, Priority: "normal", Max: 1, Wait: wait, Visibility: 10 * time.Minute})
		must(t, err)
		return ds
	}
	ds := recv(sqsqueue.MaxWait)
	if len(ds) != 1 {
		t.Fatalf("received %d messages, want the one sent", len(ds))
	}
	if again := recv(0); len(again) != 0 {
		t.Fatalf("the received message is visible again at once: %+v", again)
	}

	// Lambda hands the worker the message as a record; its claim fails.
	e := newEnv(t)
	body, err := json.Marshal(ds[0].Message)
	must(t, err)
	ev := events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: "m-1", ReceiptHandle: ds[0].Receipt, Body: string(body), EventSource: "aws:sqs",
		Attributes: map[string]string{"ApproximateReceiveCount": "1"},
	}}}
	rec := &recorder{Status: e.hsc, failClaim: "flaky-claim"}
	resp, err := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: rec, Queue: q}).Handle(context.Background(), ev)
	must(t, err)
	if len(resp.BatchItemFailures) != 1 {
		t.Fatalf("batchItemFailures %v, want the record", failures(resp))
	}
	// RetryDelay(1) is two seconds; a long poll waits up to twenty.
	back := recv(sqsqueue.MaxWait)
	if len(back) != 1 || back[0].TaskID != "flaky-claim" || back[0].ReceiveCount != 2 {
		t.Fatalf("received %+v within a long poll, want the failed record's message again", back)
	}
}

// TestBatchHiddenWhileRunning, on SQS: an invocation keeps its batch's messages hidden while its
// records run, extending them by a heartbeat timeout (here 200 ms, so SQS's least, a second)
// every half of one, rather than leaving them to the queue's visibility (here ten minutes, six
// function timeouts on AWS) or hiding them until its deadline: a run three times the visibility
// long is not received twice, and once the invocation is over, its message (which nobody
// deletes here, as after a crash: it times its task's lease) comes back within seconds, long
// before the invocation's deadline.
func TestBatchHiddenWhileRunning(t *testing.T) {
	t.Parallel()
	awsCfg := awstest.Config(t, "SQS")
	prefix := awstest.Name("atfw")
	awstest.Cleanup(t, prefix)
	q, err := sqsqueue.New(sqs.NewFromConfig(awsCfg), sqsqueue.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	must(t, err)
	ctx := t.Context()
	must(t, q.Create(ctx, echo))
	e := newEnv(t)
	e.put(t, "long", `{}`, 0, false)
	msg := task.Message{Lambda: echo.Name, Priority: "normal", TaskID: "long"}
	must(t, q.Send(ctx, msg))
	recv := func(wait time.Duration) []task.Delivery {
		t.Helper()
		ds, err := q.Receive(ctx, task.ReceiveParams{Lambda: echo.Name, Priority: "normal", Max: 1, Wait: wait, Visibility: 10 * time.Minute})
		must(t, err)
		return ds
	}
	ds := recv(sqsqueue.MaxWait)
	if len(ds) != 1 {
		t.Fatalf("received %d messages, want the one sent", len(ds))
	}
	body, err := json.Marshal(ds[0].Message)
	must(t, err)
	ev := events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: ds[0].ID, ReceiptHandle: ds[0].Receipt, Body: string(body), EventSource: "aws:sqs",
		Attributes: map[string]string{"ApproximateReceiveCount": "1"},
	}}}
	const run = 3 * time.Second
	var runs atomic.Int32
	h := newHandler(t, sqsworker.Config{Status: e.hsc, Queue: q, Margin: time.Second, Handler: worker.HandlerFunc(func(ctx context.Context, _ worker.Task) (json.RawMessage, error) {
		runs.Add(1)
		select {
		case <-time.After(run):
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})})
	invocation, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := time.Now()
	type handled struct {
		resp events.SQSEventResponse
		err  error
	}
	done := make(chan handled, 1)
	go func() {
		resp, err := h.Handle(invocation, ev)
		done <- handled{resp, err}
	}()
	for time.Since(started) < run-time.Second { // the run outlasts its message's visibility thrice
		if got := recv(time.Second); len(got) != 0 {
			t.Fatalf("the message of a running task came back after %s, while its run went on", time.Since(started))
		}
	}
	r := <-done
	must(t, r.err)
	if len(r.resp.BatchItemFailures) != 0 || runs.Load() != 1 {
		t.Fatalf("batchItemFailures %v, %d runs; want none, one", failures(r.resp), runs.Load())
	}
	if got := e.get(t, "long"); got.Status != task.StatusSuccess {
		t.Fatalf("task is %s, want success", got.Status)
	}
	ended := time.Now()
	back := recv(sqsqueue.MaxWait)
	if len(back) != 1 || back[0].TaskID != "long" {
		t.Fatalf("within %s of the invocation's end the message did not come back (%+v): hidden until the invocation's deadline or for the queue's visibility, not while it ran", time.Since(ended), back)
	}
}
