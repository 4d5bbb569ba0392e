package local_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// TestDrainDeadLetters, on DynamoDB and SQS (moto): messages that exhausted their receives sit
// in the dead-letter queue; one drain sends the task still enqueued again (counting the trip),
// ends dead the task whose messages went there too often, deletes the stale messages and the
// poison, and leaves the dead-letter queue empty. A second drain, of an idle environment, costs
// one receive per dead-letter queue.
func TestDrainDeadLetters(t *testing.T) {
	ctx := t.Context()
	l := task.Lambda{Name: "dl", Priorities: []string{"high", "low"}}.WithDefaults()
	b := awstest.NewBackend(t, "atf-dlq", l)
	// The queues again, with a redrive policy that moves a message after one receive.
	q, err := sqsqueue.New(b.SQS, sqsqueue.Config{Prefix: b.Name, MaxReceiveCount: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	put := func(id string, status task.Status) task.Task {
		tk, err := task.New(task.Spec{ID: id, Payload: []byte(`{}`)}, l, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		tk.Priority = "high"
		if tk, err = task.Enqueue(tk, now, cfg); err != nil {
			t.Fatal(err)
		}
		if status.Terminal() {
			tk.Status, tk.NextTriggerAt = status, nil
		}
		if err := b.Store.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	live, looping := put("live", task.StatusEnqueued), put("looping", task.StatusEnqueued)
	put("done", task.StatusSuccess)
	tired := looping.MessageAt(time.Now())
	tired.DeadLetterTrips = task.MaxDeadLetterTrips - 1
	gone := live.MessageAt(time.Now())
	gone.TaskID = "gone"
	if err := q.Send(ctx, live.MessageAt(time.Now()), tired, gone, task.Message{Lambda: "dl", Priority: "high", TaskID: "done"}); err != nil {
		t.Fatal(err)
	}
	url, err := b.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(b.Name + "-dl-high")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String("not a task")}); err != nil {
		t.Fatal(err)
	}
	// Received once, never deleted: the next receive moves them to the dead-letter queue.
	deadline := time.Now().Add(time.Minute)
	for received := 0; ; {
		ds, err := q.Receive(ctx, task.ReceiveParams{Lambda: "dl", Priority: "high", Max: 10, Wait: time.Second, Visibility: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		received += len(ds)
		if received >= 4 && len(ds) == 0 && dlqDepth(t, b.SQS, b.Name+"-dl-high-dlq") == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the messages never reached the dead-letter queue (received %d)", received)
		}
		time.Sleep(time.Second)
	}

	cons := consumer.New(b.Store, q, consumer.Config{Lambdas: task.FixedCatalog{l}, Task: cfg, Logger: slog.New(slog.DiscardHandler)})
	st, err := cons.Drain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Resent != 1 || st.Dead != 1 || st.Stale != 2 || st.Poison != 1 || st.Failed != 0 {
		t.Fatalf("drain: %+v, want 1 resent, 1 dead, 2 stale, 1 poison", st)
	}
	if n := dlqDepth(t, b.SQS, b.Name+"-dl-high-dlq"); n != 0 {
		t.Errorf("the dead-letter queue holds %d messages after the drain", n)
	}
	got, err := b.Store.Get(ctx, "dl", "live")
	if err != nil || got.Status != task.StatusEnqueued || got.Version != live.Version+1 {
		t.Errorf("live after the drain: %s version %d, %v; want enqueued, version %d", got.Status, got.Version, err, live.Version+1)
	}
	ds, err := q.Receive(ctx, task.ReceiveParams{Lambda: "dl", Priority: "high", Max: 10, Wait: 5 * time.Second, Visibility: time.Minute})
	if err != nil || len(ds) != 1 || ds[0].TaskID != "live" || ds[0].DeadLetterTrips != 1 {
		t.Fatalf("the queue after the drain: %+v, %v; want live's message, its first trip counted", ds, err)
	}
	got, err = b.Store.Get(ctx, "dl", "looping")
	if err != nil || got.Status != task.StatusDead || !strings.Contains(got.Error, "dead-letter queue") {
		t.Errorf("looping after the drain: %s %q, %v; want dead, saying why", got.Status, got.Error, err)
	}

	idle, err := cons.Drain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if idle.Receives != len(l.Priorities) || idle.Resent+idle.Dead+idle.Stale+idle.Poison+idle.Failed != 0 {
		t.Errorf("a drain of empty dead-letter queues: %+v, want %d receives and nothing else", idle, len(l.Priorities))
	}
}

func dlqDepth(t *testing.T, c *sqs.Client, name string) int {
	t.Helper()
	url, err := c.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: &name})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range out.Attributes {
		var k int
		fmt.Sscan(v, &k)
		n += k
	}
	return n
}
