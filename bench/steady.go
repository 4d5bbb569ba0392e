package main

import (
	"fmt"
	"io"
	"math"

	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/store/dynamostore"
)

// The monthly bill of a steady load (issue 31): one lambda taking steadyTasksPerS tasks a second
// for a month, priced from what a task of the headline case was measured to use, on demand and on
// provisioned capacity, with the shard count of docs/capacity.md's model ("Load on partitions";
// "A steady 10,000 tasks a second" explains the rest).
const (
	steadyTasksPerS = 10_000

	// steadyTargetUtilization is the auto scaling target that provisions the table: capacity
	// 1/0.7 = 1.43 times the units consumed, the headroom that absorbs a rise while auto scaling
	// catches up (it adds capacity after two minutes above the target).
	steadyTargetUtilization = 0.70

	// The model's shard count, S = ⌈4R / (1000 u)⌉, each shard key kept at u = 0.5 of a
	// partition's 1,000 WRU/s: set when a task wrote the due index 4 times, and kept for the
	// counter items, which bind now that a task sent first, its lease timed by its message,
	// writes it none (docs/capacity.md, "Load on partitions").
	dueWritesPerTask     = 4
	partitionWRU         = 1000
	partitionUtilization = 0.5

	// The consumer's pass over a busy lambda (docs/capacity.md, "Choosing the shard count"): one
	// eventually consistent query (½ RRU) per shard of each of its 4 + P lanes, its schedules' query
	// (½) and a gate read (1); a lambda whose last pass saw tasks is not asked Store.Triggered.
	sweepLanesBesidesPriorities = 4
	sweepFixedReadUnits         = 0.5 + 1

	// CloudWatch metrics: the series of the functions' EMF (shared/adapter/emf) for one lambda whose
	// tasks succeed at once, TaskEvents of scheduled, started and succeeded, DeliveryLatency,
	// HandlerDuration, SweepDuration and SweepErrors, and its cost's WriteUnits, ReadUnits and
	// Invocations (docs/capacity.md, "Cost per lambda"); and the environment's LambdasReads,
	// LambdasReadErrors and LambdasAge. StoreErrors is made only by a failure.
	emfSeriesPerLambda      = 10
	emfSeriesPerEnvironment = 3

	// lifecycleEventsPerTask: scheduled, started, succeeded, where an environment publishes them.
	lifecycleEventsPerTask = 3
)

// SteadyBill is a month of a steady load, by service, on demand and provisioned.
type SteadyBill struct {
	Case          string  `json:"case"` // whose measured units per task
	TasksPerS     float64 `json:"tasks_per_s"`
	TasksPerMonth float64 `json:"tasks_per_month"`
	Priorities    int     `json:"priorities"`
	Shards        int     `json:"shards"`          // the model's
	MeasuredAt    int     `json:"measured_shards"` // the bench's, where the units were measured
	// Units a second: the tasks' as measured, and for reads the consumer's passes over the shards.
	WriteUnitsPerS     float64      `json:"dynamodb_write_units_per_s"`
	ReadUnitsPerS      float64      `json:"dynamodb_read_units_per_s"`
	SweepReadUnitsPerS float64      `json:"consumer_read_units_per_s"`
	TargetUtilization  float64      `json:"target_utilization"`
	WCU                float64      `json:"provisioned_wcu"`
	RCU                float64      `json:"provisioned_rcu"`
	Lines              []SteadyLine `json:"lines"`
	OnDemand           float64      `json:"usd_per_month_on_demand"`
	Provisioned        float64      `json:"usd_per_month_provisioned"`
	// LeftOut is priced but not in the totals: opt-in per environment.
	LeftOut []SteadyLine `json:"left_out"`
}

// SteadyLine is one service's share of a SteadyBill.
type SteadyLine struct {
	Service     string  `json:"service"`
	Basis       string  `json:"basis"`
	OnDemand    float64 `json:"usd_on_demand"`
	Provisioned float64 `json:"usd_provisioned"`
}

// steadyShards is the model's shard count for a lambda taking rate tasks a second.
func steadyShards(rate float64) int {
	return int(math.Ceil(dueWritesPerTask * rate / (partitionWRU * partitionUtilization)))
}

// steadyBill prices a month of rate tasks a second of one lambda of priorities priorities, each
// task using perTask (a case's measured usage, named caseName).
func steadyBill(caseName string, perTask cost.Usage, rate float64, priorities int) SteadyBill {
	secs := month.Seconds()
	b := SteadyBill{Case: caseName, TasksPerS: rate, TasksPerMonth: rate * secs, Priorities: priorities,
		Shards: steadyShards(rate), MeasuredAt: dynamostore.DefaultShards, TargetUtilization: steadyTargetUtilization}
	u := perTask.Scale(b.TasksPerMonth)
	usd := u.Cost()
	both := func(service, basis string, usd float64) {
		b.Lines = append(b.Lines, SteadyLine{Service: service, Basis: basis, OnDemand: usd, Provisioned: usd})
	}

	both(cost.SvcAPIGateway, fmt.Sprintf("%s requests × $%g/M", num(u.APIRequests), cost.APIGatewayHTTPPerMillion), usd[cost.SvcAPIGateway])

	// The tasks' functions as measured, and the consumer, which a busy lambda keeps passing for
	// its whole minute (less its margin) every minute.
	var invocations, gbs float64
	for _, l := range u.Lambda {
		invocations, gbs = invocations+l.Invocations, gbs+l.GBSeconds
	}
	consumerCalls := month.Minutes() / consumerfn.Period.Minutes()
	consumerGBs := consumerCalls * cost.GBSeconds(ms(consumerfn.Period-consumerfn.DefaultMargin), ConsumerMemoryMB)
	both(cost.SvcLambda, fmt.Sprintf("the tasks' %s invocations and %s GB-s; the consumer's %s invocations of %.0f s at %d MB",
		num(invocations), num(gbs), num(consumerCalls), (consumerfn.Period-consumerfn.DefaultMargin).Seconds(), ConsumerMemoryMB),
		usd[cost.SvcLambda]+consumerCalls*cost.LambdaRequestsPerMillion/1e6+consumerGBs*cost.LambdaArmPerGBSecond)

	// DynamoDB: the same units a second, bought by the unit or as capacity held every hour.
	passesPerS := 1 / consumerfn.DefaultInterval.Seconds()
	b.SweepReadUnitsPerS = passesPerS * (float64(sweepLanesBesidesPriorities+priorities)*float64(b.Shards)/2 + sweepFixedReadUnits)
	b.WriteUnitsPerS = perTask.WriteUnits * rate
	b.ReadUnitsPerS = perTask.ReadUnits*rate + b.SweepReadUnitsPerS
	b.WCU = math.Ceil(b.WriteUnitsPerS / b.TargetUtilization)
	b.RCU = math.Ceil(b.ReadUnitsPerS / b.TargetUtilization)
	b.Lines = append(b.Lines, SteadyLine{Service: cost.SvcDynamoDB + " writes",
		Basis: fmt.Sprintf("%.2f WRU a task: %s WRU/s × $%g/M; provisioned %s WCU (at %.0f%%) × %.0f h × $%g",
			perTask.WriteUnits, num(b.WriteUnitsPerS), cost.DynamoDBWritePerMillion, num(b.WCU), b.TargetUtilization*100, hoursPerMonth, cost.DynamoDBWCUHour),
		OnDemand:    b.WriteUnitsPerS * secs * cost.DynamoDBWritePerMillion / 1e6,
		Provisioned: b.WCU * hoursPerMonth * cost.DynamoDBWCUHour})
	b.Lines = append(b.Lines, SteadyLine{Service: cost.SvcDynamoDB + " reads",
		Basis: fmt.Sprintf("%.2f RRU a task and the consumer's passes over %d shards, %s RRU/s: %s RRU/s × $%g/M; provisioned %s RCU × %.0f h × $%g",
			perTask.ReadUnits, b.Shards, num(b.SweepReadUnitsPerS), num(b.ReadUnitsPerS), cost.DynamoDBReadPerMillion, num(b.RCU), hoursPerMonth, cost.DynamoDBRCUHour),
		OnDemand:    b.ReadUnitsPerS * secs * cost.DynamoDBReadPerMillion / 1e6,
		Provisioned: b.RCU * hoursPerMonth * cost.DynamoDBRCUHour})
	both(cost.SvcDynamoDB+" storage", fmt.Sprintf("%s GB held (finished tasks kept %.0f days) × $%g", num(u.StorageGBMonths), dynamostore.DefaultRetention.Hours()/24, cost.DynamoDBStoragePerGBMo),
		u.StorageGBMonths*cost.DynamoDBStoragePerGBMo)

	both(cost.SvcSQS, fmt.Sprintf("%s requests × $%g/M", num(u.SQSRequests), cost.SQSStandardPerMillion), usd[cost.SvcSQS])
	both(cost.SvcEventBridge, fmt.Sprintf("the consumer's schedule, %s events of a rule on the default bus: free", num(consumerCalls)),
		usd[cost.SvcEventBridge]+consumerCalls*cost.EventBridgeScheduledRulePerMillion/1e6)
	both(cost.SvcLogs, fmt.Sprintf("%.0f bytes a task: %s GB × $%g", perTask.LogBytes, num(u.LogBytes/(1<<30)), cost.CloudWatchLogsPerGB), usd[cost.SvcLogs])
	series := float64(emfSeriesPerLambda + emfSeriesPerEnvironment)
	both("CloudWatch metrics", fmt.Sprintf("%.0f custom metrics (%d of the lambda, %d of the environment) × $%g",
		series, emfSeriesPerLambda, emfSeriesPerEnvironment, CloudWatchCustomMetricPerMonth), series*CloudWatchCustomMetricPerMonth)

	events := b.TasksPerMonth * lifecycleEventsPerTask
	eventsUSD := events * cost.EventBridgeCustomEventsPerMillion / 1e6
	b.LeftOut = append(b.LeftOut, SteadyLine{Service: "EventBridge lifecycle events, where the environment publishes them",
		Basis: fmt.Sprintf("%d a task: %s events × $%g/M", lifecycleEventsPerTask, num(events), cost.EventBridgeCustomEventsPerMillion), OnDemand: eventsUSD, Provisioned: eventsUSD})

	for _, l := range b.Lines {
		b.OnDemand += l.OnDemand
		b.Provisioned += l.Provisioned
	}
	return b
}

// Print writes the bill as a markdown table.
func (b *SteadyBill) Print(w io.Writer) {
	fmt.Fprintf(w, "A steady %s tasks a second for a month (%s tasks), one lambda of %d priorities on %d shards (docs/capacity.md: S = ⌈4R / 500⌉), from the units per task of \"%s\" (measured at %d shards); provisioned at %.0f%% target utilization: %s WCU, %s RCU; list prices checked %s, provisioned %s\n\n",
		num(b.TasksPerS), num(b.TasksPerMonth), b.Priorities, b.Shards, b.Case, b.MeasuredAt, b.TargetUtilization*100,
		num(b.WCU), num(b.RCU), cost.PricesChecked, cost.ProvisionedPricesChecked)
	fmt.Fprintln(w, "| service | basis | on demand | provisioned |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, l := range b.Lines {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", l.Service, l.Basis, monthly(l.OnDemand), monthly(l.Provisioned))
	}
	fmt.Fprintf(w, "| **total, a month** | | **%s** | **%s** |\n", monthly(b.OnDemand), monthly(b.Provisioned))
	for _, l := range b.LeftOut {
		fmt.Fprintf(w, "| %s: not in the total | %s | %s | %s |\n", l.Service, l.Basis, monthly(l.OnDemand), monthly(l.Provisioned))
	}
	fmt.Fprintln(w)
}

// monthly formats a monthly sum: whole dollars with separators from $1,000 up.
func monthly(v float64) string {
	if math.Abs(v) >= 1000 {
		return "$" + num(v)
	}
	return usd(v)
}
