package awstest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// EventBus is an EventBridge event bus of one test, with a rule that sends every event of
// pattern to an SQS queue: the emulated target of lifecycle events.
type EventBus struct {
	Name     string
	Events   *eventbridge.Client
	SQS      *sqs.Client
	QueueURL string
}

// NewEventBus creates a bus called name (see Name), a queue, and a rule on the bus
// matching pattern (an EventBridge event pattern) with the queue as its target, on the endpoints
// of the environment (AWS_ENDPOINT_URL_EVENTBRIDGE, AWS_ENDPOINT_URL_SQS), and deletes them when
// the test ends.
func NewEventBus(t testing.TB, name, pattern string) EventBus {
	t.Helper()
	b := EventBus{Name: name, Events: eventbridge.NewFromConfig(Config(t, "EVENTBRIDGE")), SQS: sqs.NewFromConfig(Config(t, "SQS"))}
	ctx := t.Context()
	if _, err := b.Events.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: &b.Name}); err != nil {
		t.Fatal(err)
	}
	q, err := b.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &b.Name})
	if err != nil {
		t.Fatal(err)
	}
	b.QueueURL = aws.ToString(q.QueueUrl)
	t.Cleanup(func() { // best effort
		ctx := context.Background()
		_, _ = b.Events.RemoveTargets(ctx, &eventbridge.RemoveTargetsInput{Rule: &b.Name, EventBusName: &b.Name, Ids: []string{"queue"}})
		_, _ = b.Events.DeleteRule(ctx, &eventbridge.DeleteRuleInput{Name: &b.Name, EventBusName: &b.Name})
		_, _ = b.Events.DeleteEventBus(ctx, &eventbridge.DeleteEventBusInput{Name: &b.Name})
		_, _ = b.SQS.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: &b.QueueURL})
	})
	attrs, err := b.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &b.QueueURL, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Events.PutRule(ctx, &eventbridge.PutRuleInput{Name: &b.Name, EventBusName: &b.Name, EventPattern: &pattern}); err != nil {
		t.Fatal(err)
	}
	arn := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	out, err := b.Events.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: &b.Name, EventBusName: &b.Name,
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: &arn}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.FailedEntryCount != 0 {
		t.Fatalf("put the rule's target: %+v", out.FailedEntries)
	}
	return b
}

// Receive takes the events on the target queue, each the JSON body the rule delivered, until
// done says it has enough (given all received so far) or timeout passes; it returns them all.
func (b EventBus) Receive(t testing.TB, timeout time.Duration, done func(events []json.RawMessage) bool) []json.RawMessage {
	t.Helper()
	var got []json.RawMessage
	deadline := time.Now().Add(timeout)
	for !done(got) && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		out, err := b.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &b.QueueURL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			got = append(got, json.RawMessage(aws.ToString(m.Body)))
			if _, err := b.SQS.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: &b.QueueURL, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return got
}
