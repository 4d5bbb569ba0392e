// Package cost prices atf's work on AWS: the list prices of the services a task uses, and Usage,
// what some work consumed of each, turned into dollars. `make bench` prices what it measures with
// it (bench/), and the product what it counts (the atf dev dashboard, the CloudWatch dashboard's
// dollars per lambda), so that every figure atf shows comes from one price list. It imports
// nothing but the standard library (and, for units.go's model, the domain, shared/task).
package cost

import (
	"maps"
	"slices"
)

// List prices in us-east-1, on demand, in USD, without free tiers or volume discounts (the first
// tier of each). Checked on 2026-11-23 against the pages named; re-check them when they age.
const (
	PricesChecked = "2026-11-23"
	// ProvisionedPricesChecked is when the provisioned capacity prices were checked.
	ProvisionedPricesChecked = "2026-11-28"

	// https://aws.amazon.com/api-gateway/pricing/ : HTTP APIs (the stack's, infra/stack/api.go),
	// first 300 million requests a month, per request of up to 512 KB.
	APIGatewayHTTPPerMillion = 1.00

	// https://aws.amazon.com/lambda/pricing/ : requests, and duration on Arm (the stack's functions
	// are arm64, infra/stack/function.go), first 7.5 billion GB-seconds a month. Billed per 1 ms.
	LambdaRequestsPerMillion = 0.20
	LambdaArmPerGBSecond     = 0.0000133334

	// https://aws.amazon.com/dynamodb/pricing/on-demand/ : on-demand, Standard table class, the
	// prices since 1 November 2024; storage per GB-month after the free 25 GB.
	DynamoDBWritePerMillion = 0.625
	DynamoDBReadPerMillion  = 0.125
	DynamoDBStoragePerGBMo  = 0.25

	// https://aws.amazon.com/dynamodb/pricing/provisioned/ : provisioned capacity, Standard table
	// class, per capacity unit and hour: a WCU writes up to 1 KB a second, an RCU reads up to
	// 4 KB a second strongly consistent (two eventually consistent). Unchanged by the on-demand
	// cut of November 2024. Checked on ProvisionedPricesChecked; the page draws its price table by
	// script, so these are the figures as quoted from it rather than read off it.
	DynamoDBWCUHour = 0.00065
	DynamoDBRCUHour = 0.00013

	// https://aws.amazon.com/sqs/pricing/ : standard queues, first 100 billion requests a month;
	// every 64 KB chunk of a request's payload is one request (atf's messages are ~100 bytes).
	// The requests of a Lambda event source mapping (receive, delete) are billed to the account.
	SQSStandardPerMillion = 0.40

	// https://aws.amazon.com/eventbridge/pricing/ : the consumer is started by a scheduled rule
	// (rate(1 minute), infra/stack/consumer.go) on the default bus, whose events come from AWS
	// itself and are not billed. (EventBridge Scheduler would be $1.00 per million invocations
	// after 14 million free a month: 43,200 a month would cost nothing either.)
	EventBridgeScheduledRulePerMillion = 0.0
	// https://aws.amazon.com/eventbridge/pricing/ : events put on a custom bus, per 64 KB chunk: the
	// lifecycle events of an environment that publishes them (docs/capacity.md).
	EventBridgeCustomEventsPerMillion = 1.00

	// https://aws.amazon.com/cloudwatch/pricing/ : Logs, standard ingestion per GB. What the
	// functions log, their START/END/REPORT lines and API Gateway's access log all land there.
	CloudWatchLogsPerGB = 0.50
)

// Services, in the order a bill shows them.
const (
	SvcAPIGateway  = "API Gateway"
	SvcLambda      = "Lambda"
	SvcDynamoDB    = "DynamoDB"
	SvcSQS         = "SQS"
	SvcEventBridge = "EventBridge"
	SvcLogs        = "CloudWatch Logs"
)

// Services are the services Usage prices, in the order a bill shows them.
var Services = []string{SvcAPIGateway, SvcLambda, SvcDynamoDB, SvcSQS, SvcEventBridge, SvcLogs}

// Usage is what some work consumed of each priced dimension: per task for a case, per month for
// the idle consumer.
type Usage struct {
	APIRequests float64 `json:"api_gateway_requests"`
	// Lambda by function name: invocations and GB-seconds (billed milliseconds × memory).
	Lambda            map[string]LambdaUse `json:"lambda"`
	WriteUnits        float64              `json:"dynamodb_write_units"`
	ReadUnits         float64              `json:"dynamodb_read_units"`
	StorageGBMonths   float64              `json:"dynamodb_storage_gb_months"`
	SQSRequests       float64              `json:"sqs_requests"`
	EventBridgeEvents float64              `json:"eventbridge_scheduled_events"`
	LogBytes          float64              `json:"log_bytes"`
}

// LambdaUse is one function's share of a Usage.
type LambdaUse struct {
	Invocations float64 `json:"invocations"`
	GBSeconds   float64 `json:"gb_seconds"`
}

// GBSeconds is what one invocation of billed milliseconds costs in GB-seconds at memoryMB.
func GBSeconds(billedMS float64, memoryMB int) float64 {
	return billedMS / 1000 * float64(memoryMB) / 1024
}

// Cost prices u: USD by service.
func (u Usage) Cost() map[string]float64 {
	c := map[string]float64{}
	c[SvcAPIGateway] = u.APIRequests * APIGatewayHTTPPerMillion / 1e6
	for _, l := range u.Lambda {
		c[SvcLambda] += l.Invocations*LambdaRequestsPerMillion/1e6 + l.GBSeconds*LambdaArmPerGBSecond
	}
	c[SvcDynamoDB] = u.WriteUnits*DynamoDBWritePerMillion/1e6 + u.ReadUnits*DynamoDBReadPerMillion/1e6 + u.StorageGBMonths*DynamoDBStoragePerGBMo
	c[SvcSQS] = u.SQSRequests * SQSStandardPerMillion / 1e6
	c[SvcEventBridge] = u.EventBridgeEvents * EventBridgeScheduledRulePerMillion / 1e6
	c[SvcLogs] = u.LogBytes / (1 << 30) * CloudWatchLogsPerGB
	return c
}

// Total adds up a cost by service.
func Total(cost map[string]float64) float64 {
	t := 0.0
	for _, k := range slices.Sorted(maps.Keys(cost)) { // a fixed order: the same sum every time
		t += cost[k]
	}
	return t
}

// Scale returns u times f: a per-task usage times a million is the usage of a million tasks.
func (u Usage) Scale(f float64) Usage {
	out := u
	out.APIRequests *= f
	out.WriteUnits *= f
	out.ReadUnits *= f
	out.StorageGBMonths *= f
	out.SQSRequests *= f
	out.EventBridgeEvents *= f
	out.LogBytes *= f
	out.Lambda = map[string]LambdaUse{}
	for k, l := range u.Lambda {
		out.Lambda[k] = LambdaUse{Invocations: l.Invocations * f, GBSeconds: l.GBSeconds * f}
	}
	return out
}
