package stack

import (
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/adapter/emf"
	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/lifecycle"
)

// The stack's custom metrics are the ones the functions and executors write in their logs as
// CloudWatch Embedded Metric Format (package emf), in the namespace atf/<environment>
// (ATF_METRICS_NAMESPACE, commonEnv). They replace the log metric filters of earlier versions:
// a metric filter matched the shape of a log record ("status": "dead" in any record), needed one
// filter resource per log group and metric, and counted what a log line said rather than what the
// store did; an EMF metric is written where the store write happens (package metrics wraps the
// store), so every path that ends a task dead counts it once, whichever function made the write,
// with its units, and adds no resource to the stack.
const (
	// metricTaskEvents counts the lifecycle events of the store's writes, dimensions Lambda and
	// Event (succeeded, retried, failed, dead, ...): Event dead is the tasks that ran out of
	// attempts or past their deadline.
	metricTaskEvents = emf.TaskEvents
	// metricDeliveryLatency is, per claimed task, how late it was claimed after it was due, in
	// milliseconds, dimension Lambda: written by the status function (or in-process by ECS
	// executors) when it claims a task's first attempt.
	metricDeliveryLatency = emf.DeliveryLatency
	metricHandlerDuration = emf.HandlerDuration // ms, dimension Lambda: handler runs
	metricSweepDuration   = emf.SweepDuration   // ms, dimension Lambda: the consumer's passes
	// metricStoreErrors counts store calls that failed for a reason of the store's own
	// (throttled, timeout, ...), without dimensions (and by Operation).
	metricStoreErrors = emf.StoreErrors
	// metricWriteUnits and metricReadUnits are DynamoDB's capacity units of the store calls made
	// for a lambda, and metricInvocations the invocations of the API, consumer and status
	// functions that made them; dimension Lambda.
	metricWriteUnits  = emf.WriteUnits
	metricReadUnits   = emf.ReadUnits
	metricInvocations = emf.Invocations
)

// alarmPeriod is the period of every alarm: one period at or over the threshold fires it.
const alarmPeriod = 5 * time.Minute

// metrics are the stack's custom metrics.
type metrics struct {
	namespace string
}

func newMetrics(d *deployment) *metrics { return &metrics{namespace: metricsNamespace(d)} }

// metricsNamespace is the namespace of an environment's custom metrics.
func metricsNamespace(d *deployment) string { return "atf/" + d.name }

// metric returns one of the custom metrics of a lambda.
func (m *metrics) metric(name, lambda, statistic string) awscloudwatch.Metric {
	return m.withDimensions(name, map[string]*string{"Lambda": jsii.String(lambda)}, statistic)
}

// events returns the count of a lambda's lifecycle events of type t.
func (m *metrics) events(lambda string, t lifecycle.Type) awscloudwatch.Metric {
	return m.withDimensions(metricTaskEvents, map[string]*string{"Lambda": jsii.String(lambda), "Event": jsii.String(string(t))}, "Sum")
}

// withDimensions returns a custom metric with dims (none if nil).
func (m *metrics) withDimensions(name string, dims map[string]*string, statistic string) awscloudwatch.Metric {
	p := &awscloudwatch.MetricProps{
		Namespace: jsii.String(m.namespace), MetricName: jsii.String(name),
		Statistic: jsii.String(statistic), Period: seconds(alarmPeriod),
	}
	if dims != nil {
		p.DimensionsMap = &dims
	}
	return awscloudwatch.NewMetric(p)
}

// usdExpression is the metric math of a lambda's dollars: its write units w, read units r and
// invocations i (metricWriteUnits, metricReadUnits, metricInvocations, summed over the period)
// at the on-demand list prices of package cost, the ones `make bench` prices with. A period
// without one of them counts it as 0.
func usdExpression(w, r, i string) string {
	return fmt.Sprintf("(FILL(%s, 0) * %g + FILL(%s, 0) * %g + FILL(%s, 0) * %g) / 1000000",
		w, cost.DynamoDBWritePerMillion, r, cost.DynamoDBReadPerMillion, i, cost.LambdaRequestsPerMillion)
}

// usdToday is the dollars of lambda's store calls and of the invocations that made them over a
// day; n, the lambda's place in its widget, keeps its metrics' ids apart from the others'.
func (m *metrics) usdToday(lambda string, n int) awscloudwatch.IMetric {
	day := awscdk.Duration_Days(jsii.Number(1))
	sum := func(name string) awscloudwatch.IMetric {
		return m.metric(name, lambda, "Sum").With(&awscloudwatch.MetricOptions{Period: day})
	}
	w, r, i := fmt.Sprintf("w%d", n), fmt.Sprintf("r%d", n), fmt.Sprintf("i%d", n)
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String(usdExpression(w, r, i)),
		UsingMetrics: &map[string]awscloudwatch.IMetric{w: sum(metricWriteUnits), r: sum(metricReadUnits), i: sum(metricInvocations)},
		Label:        jsii.String(lambda + " USD"), Period: day,
	})
}
