package stack

import (
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/queue/sqsqueue"
)

// The consumer function's settings. consumerfn sweeps until shortly before the end of its
// event's minute, so an invocation takes about a minute; the timeout leaves room over it.
// Lambda's smallest memory: a sweep waits on DynamoDB and SQS, not on the CPU, and the Go binary
// runs in a few MB; an idle environment pays for the consumer's GB-seconds every minute.
const (
	consumerTimeout  = consumerfn.Period + 30*time.Second
	consumerMemoryMB = 128
)

// queueSendActions are what the API and the consumer may do on every lambda's queues: send (and
// find a queue's URL by its name), as sqsqueue does.
var queueSendActions = []string{"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}

// drainActions are what the consumer may do on the dead-letter queues, and nothing else: receive
// and delete (and find a queue's URL by its name).
var drainActions = []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueUrl"}

// consumer is the store consumer (functions/consumer), invoked by an EventBridge rule every
// minute. It reads and moves due tasks in the table and sends their messages to every lambda's
// queues; it receives from none of them. It drains their dead-letter queues (drainActions).
//
// Overlapping invocations are harmless (every move is a conditional write: docs/guarantees.md,
// "Consumer invocations that overlap"), and kept rare where the environment reserves
// concurrency: the function's reserved concurrency is then one, so a rule event that comes while
// the last minute's invocation still runs is throttled. A throttled event is dropped rather than
// retried once it is a minute old (it would sweep a minute that the next invocation already
// covers).
type consumer struct {
	*function
	rule awsevents.Rule
}

func newConsumer(scope constructs.Construct, id string, d *deployment, s *store) *consumer {
	c := &consumer{function: newFunction(scope, id, d, functionProps{
		asset: "consumer", description: "atf-" + d.name + ": sweeps due tasks into their queues, every second",
		timeout: consumerTimeout, memoryMB: consumerMemoryMB, env: d.writerEnv("", s.table.TableName()),
		reserved: consumerReserved(d.env), dropStaleEvents: true, maxEventAge: consumerfn.Period,
	})}
	s.grant(c.role, consumerActions...)
	d.grantPublish(c.role)
	d.grantReadLambdas(c.role)
	d.grantQueues(c.role, queueSendActions)
	// The drain (consumer.Drain) reads the dead-letter queues and deletes what it handled; it
	// sends the tasks it finds to their queues, as a sweep does.
	d.grantDeadLetterQueues(c.role, drainActions)
	c.rule = awsevents.NewRule(scope, jsii.String(id+"Schedule"), &awsevents.RuleProps{
		Description: jsii.String("atf-" + d.name + ": starts the consumer every minute"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(consumerfn.Period.Minutes()))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(c.function.function, &awseventstargets.LambdaFunctionProps{
			RetryAttempts: jsii.Number(0), MaxEventAge: seconds(consumerfn.Period),
		})},
	})
	return c
}

// The API and the consumer serve every lambda of every stack, and the core stack knows none of
// them: their permissions name the lambdas' resources by pattern, within the environment's names
// (atf-<env>-*), so that a lambda added or removed in its own stack changes nothing of the core.

// grantQueues lets g call actions on every queue of the environment: atf-<env>-*.
func (d *deployment) grantQueues(g awsiam.IGrantable, actions []string) {
	g.GrantPrincipal().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings(actions...), Resources: &[]*string{d.arn("sqs", d.prefix+"-*", "")},
	}))
	suppress(g.GrantPrincipal().(constructs.IConstruct), "AwsSolutions-IAM5", "The queues of every lambda, made by the lambda stacks: atf-<env>-<lambda>-<priority>, named by pattern since the core stack knows no lambda.",
		`/^Resource::arn:<AWS::Partition>:sqs:(<AWS::Region>|[a-z0-9-]+):(<AWS::AccountId>|[0-9]+):atf-[a-z0-9]+-\*(-dlq)?$/`)
}

// grantDeadLetterQueues lets g call actions on every dead-letter queue of the environment:
// atf-<env>-*-dlq (sqsqueue.DLQName), and no other queue.
func (d *deployment) grantDeadLetterQueues(g awsiam.IGrantable, actions []string) {
	g.GrantPrincipal().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings(actions...), Resources: &[]*string{d.arn("sqs", d.prefix+"-*"+sqsqueue.DLQSuffix, "")},
	}))
}

// lambdasActions read the SSM parameters of the lambda stacks: GetParametersByPath on the path
// itself, GetParameter(s) on the parameters under it.
var (
	lambdasPathActions      = []string{"ssm:GetParametersByPath"}
	lambdasParameterActions = []string{"ssm:GetParameters", "ssm:GetParameter"}
)

// grantReadLambdas lets g read the lambdas of every stack (awsfn.LambdasPath), and no other
// parameter.
func (d *deployment) grantReadLambdas(g awsiam.IGrantable) {
	path := strings.Trim(awsfn.LambdasPath(d.name), "/")
	g.GrantPrincipal().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings(lambdasPathActions...), Resources: &[]*string{d.arn("ssm", "parameter", path)},
	}))
	g.GrantPrincipal().AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions: jsii.Strings(lambdasParameterActions...), Resources: &[]*string{d.arn("ssm", "parameter", path+"/*")},
	}))
	suppress(g.GrantPrincipal().(constructs.IConstruct), "AwsSolutions-IAM5", "The parameters of the lambda stacks, one per stack under the environment's path, which the core stack cannot list.",
		`/^Resource::arn:<AWS::Partition>:ssm:(<AWS::Region>|[a-z0-9-]+):(<AWS::AccountId>|[0-9]+):parameter\/atf\/[a-z0-9]+\/lambdas\/\*$/`)
}
