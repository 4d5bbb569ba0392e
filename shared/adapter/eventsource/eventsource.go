// Package eventsource feeds function handlers on one machine the way AWS's event sources feed
// them in production, so a local run exercises the real handlers with real event shapes:
//
//   - SQS polls a queue and hands batches of messages to a handler as an event source mapping
//     with ReportBatchItemFailures does: the messages the handler reports as failed stay on the
//     queue until their visibility timeout, the others are deleted. A response that names a
//     failure by an empty identifier, or by one that is no message of the batch, fails the whole
//     batch, as on AWS.
//   - Schedule invokes a handler with an EventBridge scheduled event at a fixed rate, as the
//     rule rate(1 minute) does.
package eventsource

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// DefaultCallTimeout bounds each SQS call of an event source, beyond a receive's long poll.
const DefaultCallTimeout = 10 * time.Second

// SQSHandler is a function handler for SQS events with partial batch responses.
type SQSHandler func(ctx context.Context, e events.SQSEvent) (events.SQSEventResponse, error)

// SQS is an event source mapping of one queue.
type SQS struct {
	Client    *sqs.Client
	Queue     string // the queue name
	Handler   SQSHandler
	BatchSize int           // at most 10; 10 if zero
	Wait      time.Duration // long poll; 1s if zero
	// Timeout is the function's timeout: each invocation's context ends after it.
	Timeout time.Duration
	// Visibility hides a batch while the handler runs; at least Timeout. AWS asks for 6 × the
	// function timeout on the queue.
	Visibility time.Duration
	// Abort, when it ends, cuts short the invocations in flight; until then an invocation runs to
	// its timeout even after Run's ctx ended. Nil means never.
	Abort context.Context
	// CallTimeout bounds each SQS call, beyond a receive's long poll: a call that hangs would
	// stop the queue's deliveries for good. DefaultCallTimeout if zero.
	CallTimeout time.Duration
	Logger      *slog.Logger
}

// Run polls until ctx ends, then returns once the batch in hand is settled. It returns only ctx's
// error, or the error of finding the queue.
func (m SQS) Run(ctx context.Context) error {
	if m.BatchSize <= 0 || m.BatchSize > 10 {
		m.BatchSize = 10
	}
	if m.Wait <= 0 {
		m.Wait = time.Second
	}
	m.Visibility = max(m.Visibility, m.Timeout)
	if m.CallTimeout <= 0 {
		m.CallTimeout = DefaultCallTimeout
	}
	if m.Logger == nil {
		m.Logger = slog.Default()
	}
	url, arn, err := m.find(ctx)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		// Messages that a receive cut short took come back after their visibility.
		rctx, cancel := context.WithTimeout(ctx, m.Wait+m.CallTimeout)
		out, err := m.Client.ReceiveMessage(rctx, &sqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: int32(m.BatchSize),
			WaitTimeSeconds:             int32((m.Wait + time.Second - 1) / time.Second),
			VisibilityTimeout:           int32((m.Visibility + time.Second - 1) / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				m.Logger.Warn("receive failed", "queue", m.Queue, "err", err)
				sleep(ctx, m.Wait)
			}
			continue
		}
		if len(out.Messages) > 0 {
			m.invoke(ctx, url, arn, out.Messages)
		}
	}
	return ctx.Err()
}

func (m SQS) find(ctx context.Context) (url, arn string, err error) {
	ctx, cancel := context.WithTimeout(ctx, m.CallTimeout)
	defer cancel()
	u, err := m.Client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &m.Queue})
	if err != nil {
		return "", "", err
	}
	a, err := m.Client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: u.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", "", err
	}
	return *u.QueueUrl, a.Attributes[string(types.QueueAttributeNameQueueArn)], nil
}

// invoke runs the handler on one batch and deletes what it did not report as failed. A handler
// error fails the whole batch, as on AWS; so does a batch response that names a failure by an
// empty (or null) itemIdentifier or by one that is no message id of the batch: AWS Lambda's
// "success and failure conditions" of partial batch responses (Developer Guide, Handling errors
// for an SQS event source). Deleting the others would lose the record the handler meant.
func (m SQS) invoke(ctx context.Context, url, arn string, msgs []types.Message) {
	event := Event(arn, m.Client.Options().Region, msgs)
	base := m.Abort
	if base == nil {
		base = context.WithoutCancel(ctx)
	}
	ictx, cancel := context.WithTimeout(base, m.Timeout)
	resp, err := m.Handler(ictx, event)
	cancel()
	if err != nil {
		m.Logger.Warn("batch failed; its messages come back after their visibility timeout", "queue", m.Queue, "messages", len(msgs), "err", err)
		return
	}
	inBatch := map[string]bool{}
	for _, msg := range msgs {
		inBatch[aws.ToString(msg.MessageId)] = true
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		if f.ItemIdentifier == "" || !inBatch[f.ItemIdentifier] {
			m.Logger.Warn("the batch response names a failure by no message id of the batch: the whole batch failed; its messages come back after their visibility timeout",
				"queue", m.Queue, "messages", len(msgs), "itemIdentifier", f.ItemIdentifier)
			return
		}
		failed[f.ItemIdentifier] = true
	}
	var done []types.DeleteMessageBatchRequestEntry
	for i, msg := range msgs {
		if !failed[aws.ToString(msg.MessageId)] {
			done = append(done, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: msg.ReceiptHandle})
		}
	}
	if len(done) == 0 {
		return
	}
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), m.CallTimeout)
	defer dcancel()
	out, err := m.Client.DeleteMessageBatch(dctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: done})
	if err == nil && len(out.Failed) > 0 {
		err = errors.New(aws.ToString(out.Failed[0].Message))
	}
	if err != nil {
		m.Logger.Warn("delete failed; the messages come back as duplicates", "queue", m.Queue, "err", err)
	}
}

// Event is the SQS event AWS Lambda would build for msgs of the queue arn.
func Event(arn, region string, msgs []types.Message) events.SQSEvent {
	var e events.SQSEvent
	for _, msg := range msgs {
		e.Records = append(e.Records, events.SQSMessage{
			MessageId: aws.ToString(msg.MessageId), ReceiptHandle: aws.ToString(msg.ReceiptHandle),
			Body: aws.ToString(msg.Body), Md5OfBody: aws.ToString(msg.MD5OfBody),
			Attributes: msg.Attributes, EventSource: "aws:sqs", EventSourceARN: arn, AWSRegion: region,
		})
	}
	return e
}

// Schedule invokes Handler with a scheduled event every Period, starting at once, and waits for
// each invocation to end before the next. The event's time is the start of its period.
type Schedule struct {
	Period  time.Duration // one minute on AWS
	Handler func(ctx context.Context, e events.EventBridgeEvent) error
	// Timeout is the function's timeout: each invocation's context ends after it.
	Timeout time.Duration
	Rule    string // the rule's ARN, for the event's resources
	Logger  *slog.Logger
}

// Run invokes until ctx ends, and returns ctx's error.
func (s Schedule) Run(ctx context.Context) error {
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	for next := time.Now(); ctx.Err() == nil; next = next.Add(s.Period) {
		if !sleep(ctx, time.Until(next)) {
			break
		}
		ictx, cancel := context.WithTimeout(ctx, s.Timeout)
		err := s.Handler(ictx, events.EventBridgeEvent{
			Version: "0", DetailType: "Scheduled Event", Source: "aws.events", Time: next.UTC().Truncate(time.Second),
			Resources: []string{s.Rule}, Detail: []byte("{}"),
		})
		cancel()
		if err != nil && ctx.Err() == nil {
			s.Logger.Warn("scheduled invocation failed", "err", err)
		}
	}
	return ctx.Err()
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
