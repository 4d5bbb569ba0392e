package stack

import (
	"fmt"
	"strconv"
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

// usdExpression is the metric math of the dollars of lambda n's day: its write units w<n>, read
// units r<n> and invocations i<n> (metricWriteUnits, metricReadUnits, metricInvocations), and, for
// a lambda of kind function, its worker function's invocations wi<n> and the milliseconds of its
// worker and status functions, wd<n> and sd<n> (AWS/Lambda), at their memory; each summed over
// the period, at the on-demand list prices of package cost, the ones `make bench` prices with. A
// period without one of them counts it as 0.
func usdExpression(n, workerMB, statusMB int) string {
	price := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) } // no exponent
	e := fmt.Sprintf("(FILL(w%d, 0) * %s + FILL(r%d, 0) * %s + FILL(i%d, 0) * %s) / 1000000",
		n, price(cost.DynamoDBWritePerMillion), n, price(cost.DynamoDBReadPerMillion), n, price(cost.LambdaRequestsPerMillion))
	if workerMB > 0 {
		e += fmt.Sprintf(" + FILL(wi%d, 0) * %s / 1000000 + (FILL(wd%d, 0) * %d + FILL(sd%d, 0) * %d) / 1024000 * %s",
			n, price(cost.LambdaRequestsPerMillion), n, workerMB, n, statusMB, price(cost.LambdaArmPerGBSecond))
	}
	return e
}

// usdToday is the dollars of lambda l's day (usdExpression); n, its place in its widget, keeps its
// metrics' ids apart from the others'.
func (m *metrics) usdToday(l *lambdaResources, n int) awscloudwatch.IMetric {
	day := awscdk.Duration_Days(jsii.Number(1))
	sum := &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: day}
	id := func(prefix string) string { return fmt.Sprintf("%s%d", prefix, n) }
	using := map[string]awscloudwatch.IMetric{
		id("w"): m.metric(metricWriteUnits, l.entry.Name, "Sum").With(sum),
		id("r"): m.metric(metricReadUnits, l.entry.Name, "Sum").With(sum),
		id("i"): m.metric(metricInvocations, l.entry.Name, "Sum").With(sum),
	}
	workerMB := 0
	if l.worker != nil {
		workerMB = l.entry.Function.MemoryMB
		using[id("wi")] = l.worker.function.function.MetricInvocations(sum)
		using[id("wd")] = l.worker.function.function.MetricDuration(sum)
		using[id("sd")] = l.status.function.function.MetricDuration(sum)
	}
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String(usdExpression(n, workerMB, statusMemoryMB)), UsingMetrics: &using,
		Label: jsii.String(l.entry.Name + " USD"), Period: day,
	})
}
