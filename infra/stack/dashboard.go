package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/service/lifecycle"
)

// graph is a dashboard graph of metrics.
func graph(title string, left ...awscloudwatch.IMetric) awscloudwatch.IWidget {
	return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
		Title: jsii.String(title), Left: &left, Width: jsii.Number(6), Height: jsii.Number(6),
	})
}

// search is a CloudWatch search expression over the environment's metrics: every lambda's,
// whichever stack made it, without the core knowing any.
func search(label, query, statistic string) awscloudwatch.IMetric {
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String("SEARCH('" + query + "', '" + statistic + "', 300)"),
		Label:      jsii.String(label), Period: seconds(alarmPeriod),
	})
}

// newCoreDashboard makes the environment's dashboard, atf-<env>: the API, the consumer and the
// table on top, then, over every lambda (search expressions, so that the core does not change
// with the lambdas), the metrics the functions write (package emf): dead tasks, outcomes,
// delivery latency, handler and pass durations, the table's errors. Each lambda stack has its
// own dashboard, a row per lambda (newLambdaDashboard).
func newCoreDashboard(scope constructs.Construct, id string, d *deployment, m *metrics, a *api, cons *consumer, s *store) awscloudwatch.Dashboard {
	sum := &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum")}
	p95 := &awscloudwatch.MetricOptions{Statistic: jsii.String("p95")}
	ns := m.namespace
	byLambda := func(metric string) string { return "{" + ns + ",Lambda} MetricName=\"" + metric + "\"" }
	events := func(event string) string {
		return "{" + ns + ",Event,Lambda} MetricName=\"" + metricTaskEvents + "\" Event=\"" + event + "\""
	}
	rows := [][]awscloudwatch.IWidget{{
		graph("API requests and errors", a.api.MetricCount(sum), a.api.MetricClientError(sum), a.api.MetricServerError(sum)),
		graph("API latency p95", a.api.MetricLatency(p95), a.api.MetricIntegrationLatency(p95)),
		graph("Consumer invocations, errors, throttles", cons.function.function.MetricInvocations(sum), cons.function.function.MetricErrors(sum), cons.function.function.MetricThrottles(sum)),
	}, {
		graph("Table throttled requests", s.table.MetricThrottledRequestsForOperations(&awsdynamodb.OperationsMetricOptions{Statistic: jsii.String("Sum")})),
		graph("Table consumed units", s.table.MetricConsumedReadCapacityUnits(sum), s.table.MetricConsumedWriteCapacityUnits(sum)),
		graph("Table errors (throttled, timed out, broken)", m.withDimensions(metricStoreErrors, nil, "Sum")),
	}, {
		graph("Dead tasks", search("dead", events(string(lifecycle.Dead)), "Sum")),
		graph("Tasks succeeded, retried, failed",
			search("succeeded", events(string(lifecycle.Succeeded)), "Sum"),
			search("retried", events(string(lifecycle.Retried)), "Sum"),
			search("failed", events(string(lifecycle.Failed)), "Sum")),
		graph("Delivery latency p95 (ms)", search("delivery", byLambda(metricDeliveryLatency), "p95")),
	}, {
		graph("Handler duration p95 (ms)", search("handler", byLambda(metricHandlerDuration), "p95")),
		graph("Consumer pass duration p95 (ms)", search("pass", byLambda(metricSweepDuration), "p95")),
	}}
	return dashboard(scope, id, "atf-"+d.name, rows)
}

// newLambdaDashboard makes the dashboard of a lambda stack, atf-<env>-<stack>: a row per lambda,
// queue depth and age by priority, and its worker and status functions or its executors; then,
// over the stack's lambdas, dead-letter messages, dead tasks, delivery latency, outcomes, handler
// and pass durations, and the dollars of each lambda's day (usdToday).
func newLambdaDashboard(scope constructs.Construct, id string, d *deployment, m *metrics, stack string, lambdas []*lambdaResources) awscloudwatch.Dashboard {
	sum := &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum")}
	p95 := &awscloudwatch.MetricOptions{Statistic: jsii.String("p95")}
	max := &awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum")}
	var rows [][]awscloudwatch.IWidget
	var dlq, dead, latency, handlers, sweeps, outcomes, usd []awscloudwatch.IMetric
	for n, l := range lambdas {
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
		usd = append(usd, m.usdToday(l, n))
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
		awscloudwatch.NewSingleValueWidget(&awscloudwatch.SingleValueWidgetProps{
			Title:   jsii.String("USD per lambda, the day: DynamoDB units, functions' invocations and time"),
			Metrics: &usd, FullPrecision: jsii.Bool(true), Width: jsii.Number(12), Height: jsii.Number(6),
		}),
	})
	return dashboard(scope, id, StackName(d.name, stack), rows)
}

func dashboard(scope constructs.Construct, id, name string, rows [][]awscloudwatch.IWidget) awscloudwatch.Dashboard {
	db := awscloudwatch.NewDashboard(scope, jsii.String(id), &awscloudwatch.DashboardProps{
		DashboardName: jsii.String(name),
	})
	for _, r := range rows {
		db.AddWidgets(r...)
	}
	return db
}
