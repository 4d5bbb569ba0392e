package stack

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/service/lifecycle"
)

// dlqMessages is the number of messages in a lambda's dead-letter queues.
func dlqMessages(l *lambdaResources) awscloudwatch.IMetric {
	using := map[string]awscloudwatch.IMetric{}
	var terms []string
	for i, p := range l.queues.priorities {
		id := fmt.Sprintf("l%dp%d", l.index, i) // unique in a graph of every lambda
		using[id] = l.queues.dlq[p].MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Statistic: jsii.String("Maximum"), Period: seconds(alarmPeriod),
		})
		terms = append(terms, id)
	}
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String(strings.Join(terms, "+")), UsingMetrics: &using,
		Label: jsii.String(l.entry.Name + " dead-letter messages"), Period: seconds(alarmPeriod),
	})
}

// The alarms of an environment notify one SNS topic: the core's atf-<env>-alarms (optionally
// emailed), or an existing topic the environment names (Alarms.TopicARN), for which no stack makes
// one. In the core, errors of the consumer and of the table's calls; in each lambda stack, per
// lambda, messages in its dead-letter queues, dead tasks and the delivery latency's p95, and the
// throttles and errors of its status function. A lambda stack notifies the topic by its ARN.

// AlarmTopicName is the name of the alarm topic that the core of environment env makes.
func AlarmTopicName(env string) string { return "atf-" + env + "-alarms" }

// alarmTopicArn is the ARN of the topic the environment's alarms notify.
func (d *deployment) alarmTopicArn() *string {
	if arn := d.env.Alarms.TopicARN; arn != "" {
		return jsii.String(arn)
	}
	return d.arn("sns", AlarmTopicName(d.name), "")
}

// alarmAdder returns a function that adds an alarm under scope, notifying topic.
func alarmAdder(scope constructs.Construct, d *deployment, topic awssns.ITopic) func(id, description string, metric awscloudwatch.IMetric, threshold int) {
	return func(id, description string, metric awscloudwatch.IMetric, threshold int) {
		al := awscloudwatch.NewAlarm(scope, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String("atf-" + d.name + ": " + description),
			Metric:             metric,
			Threshold:          jsii.Number(float64(threshold)),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		al.AddAlarmAction(awscloudwatchactions.NewSnsAction(topic))
	}
}

// newCoreAlarms makes the alarm topic, unless the environment names one, and the core's alarms.
// It returns the topic.
func newCoreAlarms(scope constructs.Construct, id string, d *deployment, m *metrics, cons *consumer) awssns.ITopic {
	c := constructs.NewConstruct(scope, jsii.String(id))
	cfg := d.env.Alarms
	var topic awssns.ITopic
	if cfg.TopicARN != "" {
		topic = awssns.Topic_FromTopicArn(c, jsii.String("Topic"), d.alarmTopicArn())
	} else {
		own := awssns.NewTopic(c, jsii.String("Topic"), &awssns.TopicProps{
			TopicName:   jsii.String(AlarmTopicName(d.name)),
			DisplayName: jsii.String("atf-" + d.name + " alarms"),
			EnforceSSL:  jsii.Bool(true),
		})
		if cfg.Email != "" {
			own.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.Email), nil))
		} else {
			awscdk.Annotations_Of(own).AddWarningV2(jsii.String("atf:alarms-unsubscribed"), jsii.String(
				"nobody is subscribed to the alarm topic "+AlarmTopicName(d.name)+" (the stack's output AlarmTopicArn): set alarms.email or alarms.topic_arn in the environments file, or subscribe to the topic"))
		}
		topic = own
	}
	add := alarmAdder(c, d, topic)
	add("ConsumerErrors", "the consumer failed: no sweep succeeded in a minute", cons.function.function.MetricErrors(&awscloudwatch.MetricOptions{
		Statistic: jsii.String("Sum"), Period: seconds(alarmPeriod),
	}), cfg.ConsumerErrors)
	add("StoreErrors", "calls to the table failed (throttled, timed out, or broken): see the functions' logs, Kind and Operation",
		m.withDimensions(metricStoreErrors, nil, "Sum"), orOne(cfg.StoreErrors))
	return topic
}

// newLambdaAlarms makes the alarms of a lambda stack's lambdas, each under its lambda's construct.
func newLambdaAlarms(st awscdk.Stack, d *deployment, m *metrics, lambdas []*lambdaResources) {
	cfg := d.env.Alarms
	topic := awssns.Topic_FromTopicArn(st, jsii.String("AlarmTopic"), d.alarmTopicArn())
	for _, l := range lambdas {
		n := l.entry.Name
		add := alarmAdder(constructs.NewConstruct(l.scope, jsii.String("Alarms")), d, topic)
		if l.status != nil {
			statusAlarms(add, n, l.status, cfg)
		}
		add("DlqMessages-"+n, "messages in the dead-letter queues of lambda "+n+": poison messages, or workers that crash", dlqMessages(l), cfg.DLQMessages)
		add("DeadTasks-"+n, "tasks of lambda "+n+" ran out of attempts", m.events(n, lifecycle.Dead), cfg.DeadTasks)
		add("DeliveryP95-"+n, fmt.Sprintf("tasks of lambda %s start late: p95 of the delay from due to claim over %d ms", n, cfg.DeliveryP95Ms),
			m.metric(metricDeliveryLatency, n, "p95"), cfg.DeliveryP95Ms)
	}
}
