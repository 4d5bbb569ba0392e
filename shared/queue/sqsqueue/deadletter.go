package sqsqueue

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/openatf/atf/shared/task"
)

// ReceiveDead takes up to p.Max (at most MaxBatch) messages from the dead-letter queue of one
// lambda and priority, as Receive does from the queue. A message whose body is not a task message
// of that queue is returned too, poison, with an empty TaskID and its body in Poison, so that the
// caller can log it and delete it: the drain is its reader (consumer.Drain).
func (q *Queue) ReceiveDead(ctx context.Context, p task.ReceiveParams) ([]task.DeadLetter, error) {
	name, err := q.name(p.Lambda, p.Priority)
	if err != nil {
		return nil, err
	}
	dlq := DLQName(name)
	url, err := q.url(ctx, dlq)
	if err != nil {
		return nil, err
	}
	out, err := q.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    &url,
		MaxNumberOfMessages:         int32(min(max(p.Max, 1), MaxBatch)),
		WaitTimeSeconds:             wholeSeconds(min(p.Wait, MaxWait)),
		VisibilityTimeout:           wholeSeconds(p.Visibility),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return nil, fail(ctx, "receive from", dlq, err)
	}
	ls := make([]task.DeadLetter, 0, len(out.Messages))
	for _, m := range out.Messages {
		d, err := decode(m, p)
		l := task.DeadLetter{Delivery: d}
		if err != nil {
			l.Delivery = task.Delivery{Message: task.Message{Lambda: p.Lambda, Priority: p.Priority}, Receipt: d.Receipt, ReceiveCount: d.ReceiveCount}
			l.Poison = clip(aws.ToString(m.Body))
			l.Why = err.Error()
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// DeleteDead removes a message that ReceiveDead returned from its dead-letter queue.
func (q *Queue) DeleteDead(ctx context.Context, d task.Delivery) error {
	name, err := q.name(d.Lambda, d.Priority)
	if err != nil {
		return err
	}
	dlq := DLQName(name)
	url, err := q.url(ctx, dlq)
	if err != nil {
		return err
	}
	_, err = q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &d.Receipt})
	return receiptError(ctx, "delete a message from", dlq, d, err)
}

var _ task.DeadLetterQueue = (*Queue)(nil)
