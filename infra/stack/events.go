package stack

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/service/lifecycle"
)

// exampleRuleTypes are the detail-types the example rule matches: the tasks that ended without
// succeeding, what an owner most often wants to hear of.
var exampleRuleTypes = []lifecycle.Type{lifecycle.Failed, lifecycle.Dead, lifecycle.UpstreamFailed}

// exampleQueueRetention is how long the example rule's queue keeps an event nobody reads.
const exampleQueueRetention = 4 * 24 * time.Hour

// events is the environment's event bus of lifecycle events (package lifecycle), made when the
// environment has events: the bus atf-<env>, an archive of every atf event on it (replayable,
// kept Events.ArchiveRetentionDays), and an example rule that sends the events of tasks that
// ended without succeeding to an SQS queue (atf-<env>-events-failed). The functions that write
// the table (api, consumer, status functions, executors) publish to it, each with
// events:PutEvents on this bus alone (grantPublish); workers write nothing and get nothing.
type events struct {
	bus     awsevents.EventBus
	archive awsevents.Archive
	rule    awsevents.Rule
	queue   awssqs.Queue
}

func newEvents(scope constructs.Construct, id string, d *deployment) *events {
	c := constructs.NewConstruct(scope, jsii.String(id))
	ev := &events{}
	ev.bus = awsevents.NewEventBus(c, jsii.String("Bus"), &awsevents.EventBusProps{
		EventBusName: jsii.String(d.prefix),
		Description:  jsii.String("atf-" + d.name + ": the lifecycle events of its tasks"),
	})
	ev.archive = ev.bus.Archive(jsii.String("Archive"), &awsevents.BaseArchiveProps{
		ArchiveName:  jsii.String(d.prefix),
		Description:  jsii.String("atf-" + d.name + ": every lifecycle event, for replay"),
		EventPattern: &awsevents.EventPattern{Source: jsii.Strings(lifecycle.Source)},
		Retention:    awscdk.Duration_Days(jsii.Number(float64(d.env.Events.ArchiveRetentionDays))),
	})
	ev.queue = awssqs.NewQueue(c, jsii.String("FailedQueue"), &awssqs.QueueProps{
		QueueName:       jsii.String(d.prefix + "-events-failed"),
		RetentionPeriod: seconds(exampleQueueRetention),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
	})
	suppress(ev.queue, "AwsSolutions-SQS3", "The example rule's target: events land here to be read; one a reader cannot handle stays until it expires, so a dead-letter queue would add nothing.")
	var types []*string
	for _, t := range exampleRuleTypes {
		types = append(types, jsii.String(t.DetailType()))
	}
	ev.rule = awsevents.NewRule(c, jsii.String("FailedRule"), &awsevents.RuleProps{
		EventBus:     ev.bus,
		Description:  jsii.String("atf-" + d.name + ": an example rule: tasks that ended failed, dead or upstream_failed, to a queue"),
		EventPattern: &awsevents.EventPattern{Source: jsii.Strings(lifecycle.Source), DetailType: &types},
		Targets:      &[]awsevents.IRuleTarget{awseventstargets.NewSqsQueue(ev.queue, &awseventstargets.SqsQueueProps{})},
	})
	return ev
}

// writerEnv is commonEnv of a function or executor that writes the table: with ATF_EVENT_BUS if
// the environment has events, so that it publishes its writes' lifecycle events.
func (d *deployment) writerEnv(lambdasJSON string, table *string) map[string]*string {
	env := d.commonEnv(lambdasJSON, table)
	switch {
	case d.events != nil: // the core's own bus
		env[awsfn.EnvEventBus] = d.events.bus.EventBusName()
	case d.bus != nil: // a lambda stack's: the core's, by its name
		env[awsfn.EnvEventBus] = jsii.String(d.prefix)
	}
	return env
}

// grantPublish lets g put events on the environment's bus, and nothing else of EventBridge.
func (d *deployment) grantPublish(g awsiam.IGrantable) {
	if d.bus != nil {
		d.bus.GrantPutEventsTo(g, nil)
	}
}
