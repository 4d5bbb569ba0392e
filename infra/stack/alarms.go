package stack

import (
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The metrics that the stack derives from the functions' JSON logs with metric filters, in the
// namespace atf/<environment>, each with the dimension Lambda (the log record's "lambda"):
const (
	// DeadTasks counts tasks that ended dead: records with "status": "dead", which the
	// executor's "task ran" (in worker functions and ECS executors) and the consumer's "worker
	// lost" write when a task runs out of attempts.
	metricDeadTasks = "DeadTasks"
	// DeliveryLatency is, per claimed task, how late it was claimed after it was due, in
	// milliseconds: the "delivery_ms" that the status controller logs when it claims a task's
	// first attempt (in the status function, or in-process in ECS executors).
	metricDeliveryLatency = "DeliveryLatency"
)

// Filter patterns of those metrics.
const (
	deadPattern     = `{ ($.status = "dead") && ($.lambda = *) }`
	deliveryPattern = `{ ($.delivery_ms >= 0) && ($.lambda = *) }`
)

// alarmPeriod is the period of every alarm: one period at or over the threshold fires it.
const alarmPeriod = 5 * time.Minute

// metrics are the stack's custom metrics.
type metrics struct {
	namespace string
}

func newMetrics(scope constructs.Construct, id string, d *deployment, cons *consumer, lambdas []*lambdaResources) *metrics {
	c := constructs.NewConstruct(scope, jsii.String(id))
	m := &metrics{namespace: "atf/" + d.name}
	filter := func(id string, logs awslogs.ILogGroup, name, pattern, value string, unit awscloudwatch.Unit) {
		awslogs.NewMetricFilter(c, jsii.String(id), &awslogs.MetricFilterProps{
			LogGroup:        logs,
			FilterPattern:   awslogs.FilterPattern_Literal(jsii.String(pattern)),
			MetricNamespace: jsii.String(m.namespace),
			MetricName:      jsii.String(name),
			MetricValue:     jsii.String(value),
			Dimensions:      &map[string]*string{"Lambda": jsii.String("$.lambda")},
			Unit:            unit,
		})
	}
	filter("ConsumerDeadTasks", cons.logGroup, metricDeadTasks, deadPattern, "1", awscloudwatch.Unit_COUNT)
	for _, l := range lambdas {
		filter("DeadTasks-"+l.entry.Name, l.logs, metricDeadTasks, deadPattern, "1", awscloudwatch.Unit_COUNT)
		// Claims are logged by the lambda's status function, or by its executors in-process.
		claims := l.logs
		if l.status != nil {
			claims = l.status.logGroup
		}
		filter("DeliveryLatency-"+l.entry.Name, claims, metricDeliveryLatency, deliveryPattern, "$.delivery_ms", awscloudwatch.Unit_MILLISECONDS)
	}
	return m
}

// metric returns one of the custom metrics of a lambda.
func (m *metrics) metric(name, lambda, statistic string) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String(m.namespace), MetricName: jsii.String(name),
		DimensionsMap: &map[string]*string{"Lambda": jsii.String(lambda)},
		Statistic:     jsii.String(statistic), Period: seconds(alarmPeriod),
	})
}

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
// dead-letter queues, dead tasks and the delivery latency's p95; errors of the consumer; throttles
// and errors of each status function.
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
	for _, l := range lambdas {
		n := l.entry.Name
		if l.status != nil {
			statusAlarms(add, n, l.status, cfg)
		}
		add("DlqMessages-"+n, "messages in the dead-letter queues of lambda "+n+": poison messages, or workers that crash", dlqMessages(l), cfg.DLQMessages)
		add("DeadTasks-"+n, "tasks of lambda "+n+" ran out of attempts", m.metric(metricDeadTasks, n, "Sum"), cfg.DeadTasks)
		add("DeliveryP95-"+n, fmt.Sprintf("tasks of lambda %s start late: p95 of the delay from due to claim over %d ms", n, cfg.DeliveryP95Ms),
			m.metric(metricDeliveryLatency, n, "p95"), cfg.DeliveryP95Ms)
	}
	return a
}
