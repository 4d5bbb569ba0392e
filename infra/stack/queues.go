package stack

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/registry"
)

// queues are one lambda's SQS queues, one per priority, each with a dead-letter queue, named and
// configured as sqsqueue.Create makes them: sqsqueue.QueueName and DLQName, its retentions, its
// redrive after DefaultMaxReceiveCount receives, no default wait or delay.
type queues struct {
	priorities []string
	queue      map[string]awssqs.Queue // by priority
	dlq        map[string]awssqs.Queue
}

// workerVisibilityFactor: a function lambda's queues hide a message for this many times the
// worker function's timeout, as AWS advises for SQS event sources, so that a message is not
// delivered again while an invocation that holds it (or Lambda's retries of it) may still run.
const workerVisibilityFactor = 6

func newQueues(scope constructs.Construct, id string, d *deployment, e registry.Entry) *queues {
	c := constructs.NewConstruct(scope, jsii.String(id))
	q := &queues{priorities: e.Priorities, queue: map[string]awssqs.Queue{}, dlq: map[string]awssqs.Queue{}}
	var visibility awscdk.Duration // the SQS default (30 s) for executors, which set their own per receive
	if e.Kind == registry.KindFunction {
		visibility = seconds(workerVisibilityFactor * workerTimeout(e))
	}
	for _, p := range e.Priorities {
		name, err := sqsqueue.QueueName(d.prefix, e.Name, p)
		if err != nil {
			panic(err) // the registry's Check has said so already
		}
		q.dlq[p] = awssqs.NewQueue(c, jsii.String("Dlq-"+p), &awssqs.QueueProps{
			QueueName:       jsii.String(sqsqueue.DLQName(name)),
			RetentionPeriod: seconds(sqsqueue.DLQRetention),
			Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
			EnforceSSL:      jsii.Bool(true),
		})
		q.queue[p] = awssqs.NewQueue(c, jsii.String("Queue-"+p), &awssqs.QueueProps{
			QueueName:              jsii.String(name),
			RetentionPeriod:        seconds(sqsqueue.QueueRetention),
			VisibilityTimeout:      visibility,
			ReceiveMessageWaitTime: awscdk.Duration_Seconds(jsii.Number(0)),
			DeliveryDelay:          awscdk.Duration_Seconds(jsii.Number(0)),
			Encryption:             awssqs.QueueEncryption_SQS_MANAGED,
			EnforceSSL:             jsii.Bool(true),
			DeadLetterQueue: &awssqs.DeadLetterQueue{
				Queue: q.dlq[p], MaxReceiveCount: jsii.Number(sqsqueue.DefaultMaxReceiveCount),
			},
		})
	}
	return q
}

// workerTimeout is the timeout of a function lambda's worker function: the lambda's timeout
// plus the margin in which sqsworker stops handlers and reports before the deadline.
func workerTimeout(e registry.Entry) time.Duration {
	return e.Timeout + sqsworker.DefaultMargin
}
