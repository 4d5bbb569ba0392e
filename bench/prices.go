package main

// The list prices, the services they price and the Usage -> dollars model live in package cost
// (shared/cost), which the product's dashboards price with too.

// Function sizes as the stack deploys them (infra/stack: api.go, consumer.go, status.go); a
// worker function's memory comes from its lambda's registry entry. The infra module is not
// imported here, so these copy its constants.
const (
	APIMemoryMB      = 512
	ConsumerMemoryMB = 128
	StatusMemoryMB   = 256
)

// Log lines that the benchmark cannot observe, so estimates: Lambda's START, END and REPORT
// lines of an invocation in the text format the stack uses, and one API Gateway access log record
// with the stack's standard JSON fields; each with CloudWatch's 26 bytes of metadata per event.
const (
	LambdaPlatformLogBytes = 75 + 55 + 160 + 3*26
	APIAccessLogBytes      = 330 + 26
)
