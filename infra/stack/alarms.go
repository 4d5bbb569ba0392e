package stack

import (
	"fmt"
	"strings"

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

// alarms are an environment's alarms and the SNS topic they notify: per lambda, messages in its
// dead-letter queues, dead tasks and the delivery latency's p95; errors of the consumer and of the
// table's calls; throttles and errors of each status function.
type alarms struct {
	topic  awssns.Topic
	alarms []awscloudwatch.Alarm
}

func newAlarms(scope constructs.Construct, id string, d *deployment, m *metrics, cons *consumer, lambdas []*lambdaResources) *alarms {
	c := constructs.NewConstruct(scope, jsii.String(id))
	cfg := d.env.Alarms
	a := &alarms{}
	a.topic = awssns.NewTopic(c, jsii.String("Topic"), &awssns.TopicProps{
		DisplayName: jsii.String("atf-" + d.name + " alarms"),
		EnforceSSL:  jsii.Bool(true),
	})
	if cfg.Email != "" {
		a.topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.Email), nil))
	}
	add := func(id, description string, metric awscloudwatch.IMetric, threshold int) {
		al := awscloudwatch.NewAlarm(c, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String("atf-" + d.name + ": " + description),
			Metric:             metric,
			Threshold:          jsii.Number(float64(threshold)),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		al.AddAlarmAction(awscloudwatchactions.NewSnsAction(a.topic))
		a.alarms = append(a.alarms, al)
	}
	add("ConsumerErrors", "the consumer failed: no sweep succeeded in a minute", cons.function.function.MetricErrors(&awscloudwatch.MetricOptions{
		Statistic: jsii.String("Sum"), Period: seconds(alarmPeriod),
	}), cfg.ConsumerErrors)
	add("StoreErrors", "calls to the table failed (throttled, timed out, or broken): see the functions' logs, Kind and Operation",
		m.withDimensions(metricStoreErrors, nil, "Sum"), orOne(cfg.StoreErrors))
	for _, l := range lambdas {
		n := l.entry.Name
		if l.status != nil {
			statusAlarms(add, n, l.status, cfg)
		}
		add("DlqMessages-"+n, "messages in the dead-letter queues of lambda "+n+": poison messages, or workers that crash", dlqMessages(l), cfg.DLQMessages)
		add("DeadTasks-"+n, "tasks of lambda "+n+" ran out of attempts", m.events(n, lifecycle.Dead), cfg.DeadTasks)
		add("DeliveryP95-"+n, fmt.Sprintf("tasks of lambda %s start late: p95 of the delay from due to claim over %d ms", n, cfg.DeliveryP95Ms),
			m.metric(metricDeliveryLatency, n, "p95"), cfg.DeliveryP95Ms)
	}
	return a
}
