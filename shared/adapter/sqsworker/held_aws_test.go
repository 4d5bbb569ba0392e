package sqsworker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/service/executor"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// TestHeldMessageSentAgain, on SQS: a record held by a limit at its executor.HoldResendAt-th
// receive is acknowledged and its message sent again, which comes back received once: on a
// queue that moves a message to its dead-letter queue one receive later, the held task's message
// stays in its queue however long the hold lasts.
func TestHeldMessageSentAgain(t *testing.T) {
	t.Parallel()
	cfg := awstest.Config(t, "SQS")
	prefix := awstest.Name("atfh")
	awstest.Cleanup(t, prefix)
	q, err := sqsqueue.New(sqs.NewFromConfig(cfg), sqsqueue.Config{Prefix: prefix, MaxReceiveCount: executor.HoldResendAt + 1, Logger: slog.New(slog.DiscardHandler)})
	must(t, err)
	ctx := t.Context()
	must(t, q.Create(ctx, echo))
	e := newEnv(t)
	e.put(t, "capped", `{}`, 0, false)
	must(t, q.Send(ctx, task.Message{Lambda: echo.Name, Priority: "normal", Key: "k", TaskID: "capped"}))
	recv := func() task.Delivery {
		t.Helper()
		ds, err := q.Receive(ctx, task.ReceiveParams{Lambda: echo.Name, Priority: "normal", Max: 1, Wait: sqsqueue.MaxWait, Visibility: sqsqueue.MaxVisibility})
		must(t, err)
		if len(ds) != 1 {
			t.Fatalf("received %d messages within a long poll, want the held task's", len(ds))
		}
		return ds[0]
	}
	// Received and handed back until the receive that reaches HoldResendAt.
	d := recv()
	for d.ReceiveCount < executor.HoldResendAt {
		must(t, q.Extend(ctx, d, 0))
		d = recv()
	}
	body, err := json.Marshal(d.Message)
	must(t, err)
	ev := events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: d.ID, ReceiptHandle: d.Receipt, Body: string(body), EventSource: "aws:sqs",
		Attributes: map[string]string{"ApproximateReceiveCount": strconv.Itoa(d.ReceiveCount)},
	}}}
	resp, err := newHandler(t, sqsworker.Config{Handler: &payloadHandler{}, Status: holding{Status: e.hsc}, Queue: q}).Handle(context.Background(), ev)
	must(t, err)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batchItemFailures %v, want the held record acknowledged: its message was sent again", failures(resp))
	}
	must(t, q.Delete(ctx, d)) // as the event source mapping does with an acknowledged record
	back := recv()
	if back.TaskID != "capped" || back.Key != "k" || back.ReceiveCount != 1 {
		t.Fatalf("received %+v, want the held task's message again, with its key, received once", back)
	}
}
