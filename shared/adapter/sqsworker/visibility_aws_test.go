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
