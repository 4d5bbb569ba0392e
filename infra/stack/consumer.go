package stack

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/consumerfn"
)

// The consumer function's settings. consumerfn sweeps until shortly before the end of its
// event's minute, so an invocation takes about a minute; the timeout leaves room over it.
// Lambda's smallest memory: a sweep waits on DynamoDB and SQS, not on the CPU, and the Go binary
// runs in a few MB; an idle environment pays for the consumer's GB-seconds every minute.
const (
	consumerTimeout  = consumerfn.Period + 30*time.Second
	consumerMemoryMB = 128
)

// drainActions are what the consumer may do on the dead-letter queues, and nothing else: receive
// and delete (and find a queue's URL by its name).
var drainActions = []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueUrl"}

// consumer is the store consumer (functions/consumer), invoked by an EventBridge rule every
// minute. It reads and moves due tasks in the table and sends their messages to every lambda's
// queues; it receives from none of them. It drains their dead-letter queues (drainActions).
//
// Overlapping invocations are harmless (every move is a conditional write), and kept rare: the
// function's reserved concurrency is one, so a rule event that comes while the last minute's
// invocation still runs is throttled, and such an event is dropped rather than retried once it
// is a minute old (it would sweep a minute that the next invocation already covers).
type consumer struct {
	*function
	rule awsevents.Rule
}

func newConsumer(scope constructs.Construct, id string, d *deployment, s *store, lambdas []*lambdaResources) *consumer {
	c := &consumer{function: newFunction(scope, id, d, functionProps{
		asset: "consumer", description: "atf-" + d.name + ": sweeps due tasks into their queues, every second",
		timeout: consumerTimeout, memoryMB: consumerMemoryMB, env: d.writerEnv(d.lambdasJSON, s.table.TableName()),
		reserved: 1, dropStaleEvents: true, maxEventAge: consumerfn.Period,
	})}
	s.grant(c.role, consumerActions...)
	d.grantPublish(c.role)
	for _, l := range lambdas {
		for _, p := range l.queues.priorities {
			l.queues.queue[p].GrantSendMessages(c.role)
			// The drain (consumer.Drain) reads the dead-letter queues and deletes what it handled;
			// it sends the tasks it finds to their queues, as a sweep does.
			l.queues.dlq[p].Grant(c.role, *jsii.Strings(drainActions...)...)
		}
	}
	c.rule = awsevents.NewRule(scope, jsii.String(id+"Schedule"), &awsevents.RuleProps{
		Description: jsii.String("atf-" + d.name + ": starts the consumer every minute"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(consumerfn.Period.Minutes()))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(c.function.function, &awseventstargets.LambdaFunctionProps{
			RetryAttempts: jsii.Number(0), MaxEventAge: seconds(consumerfn.Period),
		})},
	})
	return c
}
