package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/service/lifecycle"
)

// newDashboard makes the environment's dashboard, atf-<env>: the API, the consumer and the table
// on top, then a row per lambda: queue depth and age by priority, dead-letter messages, dead
// tasks, delivery latency, and its worker and status functions or its executors; then, over every
// lambda, the metrics the functions write (package emf): outcomes, handler and pass durations,
// the table's errors.
func newDashboard(scope constructs.Construct, id string, d *deployment, m *metrics, a *api, cons *consumer, s *store, lambdas []*lambdaResources) awscloudwatch.Dashboard {
	graph := func(title string, left ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Left: &left, Width: jsii.Number(6), Height: jsii.Number(6),
		})
	}
	sum := &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum")}
	p95 := &awscloudwatch.MetricOptions{Statistic: jsii.String("p95")}
	max := &awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum")}
	rows := [][]awscloudwatch.IWidget{{
		graph("API requests and errors", a.api.MetricCount(sum), a.api.MetricClientError(sum), a.api.MetricServerError(sum)),
		graph("API latency p95", a.api.MetricLatency(p95), a.api.MetricIntegrationLatency(p95)),
		graph("Consumer invocations, errors, throttles", cons.function.function.MetricInvocations(sum), cons.function.function.MetricErrors(sum), cons.function.function.MetricThrottles(sum)),
	}, {
		graph("Table throttled requests", s.table.MetricThrottledRequestsForOperations(&awsdynamodb.OperationsMetricOptions{Statistic: jsii.String("Sum")})),
		graph("Table consumed units", s.table.MetricConsumedReadCapacityUnits(sum), s.table.MetricConsumedWriteCapacityUnits(sum)),
	}}
	var dlq, dead, latency, handlers, sweeps, outcomes []awscloudwatch.IMetric
	for _, l := range lambdas {
		var ld, la []awscloudwatch.IMetric
		for _, p := range l.queues.priorities {
			ld = append(ld, l.queues.queue[p].MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Label: jsii.String(p)}))
			la = append(la, l.queues.queue[p].MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Label: jsii.String(p)}))
		}
		row := []awscloudwatch.IWidget{graph(l.entry.Name+": queued by priority", ld...), graph(l.entry.Name+": oldest message (s)", la...)}
		if l.worker != nil {
			f := l.worker.function.function
			sf := l.status.function.function
			row = append(row, graph(l.entry.Name+": worker invocations, errors, throttles", f.MetricInvocations(sum), f.MetricErrors(sum), f.MetricThrottles(sum)),
				graph(l.entry.Name+": worker duration p95 (ms)", f.MetricDuration(p95)),
				graph(l.entry.Name+": status function calls, errors, throttles", sf.MetricInvocations(sum), sf.MetricErrors(sum), sf.MetricThrottles(sum)))
		} else if l.executor != nil {
			svc := l.executor.service
			row = append(row, graph(l.entry.Name+": executors CPU and memory (%)", svc.MetricCpuUtilization(max), svc.MetricMemoryUtilization(max)))
		}
		rows = append(rows, row)
		dlq = append(dlq, dlqMessages(l))
		dead = append(dead, m.events(l.entry.Name, lifecycle.Dead))
		latency = append(latency, m.metric(metricDeliveryLatency, l.entry.Name, "p95"))
		handlers = append(handlers, m.metric(metricHandlerDuration, l.entry.Name, "p95"))
		sweeps = append(sweeps, m.metric(metricSweepDuration, l.entry.Name, "p95"))
		for _, t := range []lifecycle.Type{lifecycle.Succeeded, lifecycle.Retried, lifecycle.Failed} {
			outcomes = append(outcomes, m.events(l.entry.Name, t).With(&awscloudwatch.MetricOptions{Label: jsii.String(l.entry.Name + " " + string(t))}))
		}
	}
	rows = append(rows, []awscloudwatch.IWidget{
		graph("Dead-letter messages", dlq...),
		graph("Dead tasks", dead...),
		graph("Delivery latency p95 (ms)", latency...),
		graph("Tasks succeeded, retried, failed", outcomes...),
	}, []awscloudwatch.IWidget{
		graph("Handler duration p95 (ms)", handlers...),
		graph("Consumer pass duration p95 (ms)", sweeps...),
		graph("Table errors (throttled, timed out, broken)", m.withDimensions(metricStoreErrors, nil, "Sum")),
	})
	db := awscloudwatch.NewDashboard(scope, jsii.String(id), &awscloudwatch.DashboardProps{
		DashboardName: jsii.String("atf-" + d.name),
	})
	for _, r := range rows {
		db.AddWidgets(r...)
	}
	return db
}
