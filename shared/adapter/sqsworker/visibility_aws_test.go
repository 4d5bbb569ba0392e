package sqsworker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
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

// TestBatchHiddenUntilInvocationEnd, on SQS: an invocation hides its batch's messages until a
// heartbeat timeout after its deadline, in one call, rather than the queue's visibility (here
// ten minutes, six function timeouts on AWS): the message of a task whose invocation crashed, which
// times its lease, comes back soon after the invocation's end. The record here is a duplicate
// (its task ended) that nobody deletes, as after a crash.
func TestBatchHiddenUntilInvocationEnd(t *testing.T) {
	t.Parallel()
	awsCfg := awstest.Config(t, "SQS")
	prefix := awstest.Name("atfw")
	awstest.Cleanup(t, prefix)
	q, err := sqsqueue.New(sqs.NewFromConfig(awsCfg), sqsqueue.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	must(t, err)
	ctx := t.Context()
	must(t, q.Create(ctx, echo))
	e := newEnv(t)
	e.put(t, "ended", `{}`, 0, true)
	msg := task.Message{Lambda: echo.Name, Priority: "normal", TaskID: "ended"}
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
	invocation, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	started := time.Now()
	resp, err := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: e.hsc, Queue: q, Margin: time.Second}).Handle(invocation, ev)
	must(t, err)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batchItemFailures %v, want none: a duplicate is acknowledged", failures(resp))
	}
	back := recv(sqsqueue.MaxWait)
	if len(back) != 1 || back[0].TaskID != "ended" {
		t.Fatalf("within %s of the invocation's start the message did not come back (%+v): hidden for the queue's visibility, not until the invocation's end", time.Since(started), back)
	}
	if took := time.Since(started); took < 3*time.Second {
		t.Fatalf("the message came back after %s, before the invocation's deadline (3 s)", took)
	}
}
