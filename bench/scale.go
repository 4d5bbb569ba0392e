package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/task"
)

// scaleLambdas are the sizes of the environments the scale part measures (issue 28): generated
// lambdas of the default priorities, idle.
var scaleLambdas = []int{10, 100, 300}

// billLambdas is the size of the environment whose whole idle bill the scale part prints.
const billLambdas = 100

// budgetLambdas is the size whose pass must fit its time budget.
const budgetLambdas = 300

// ScaleRun is the deployed consumer function (consumerfn.Deployed) over an idle environment of
// generated lambdas, on the emulators: what one invocation reads and calls, and how long its
// passes take; and one drain of the dead-letter queues.
type ScaleRun struct {
	Lambdas             int                `json:"lambdas"`
	Priorities          int                `json:"priorities"` // of each lambda
	Shards              int                `json:"shards"`
	Invocations         int                `json:"invocations_measured"`
	PassesPerInvocation float64            `json:"passes_per_invocation"`
	LooksPerInvocation  float64            `json:"looks_per_invocation"`
	FailedPasses        int                `json:"failed_passes"`
	CallsPerInvocation  map[string]OpCount `json:"calls_per_invocation"`
	// ReadUnits is per invocation, that is per idle minute: one pass (and one look) of each lambda.
	ReadUnits    float64 `json:"read_units_per_invocation"`
	DynamoDBCall float64 `json:"dynamodb_calls_per_invocation"`
	SQSCalls     float64 `json:"sqs_calls_per_invocation"`
	InvocationMS float64 `json:"invocation_ms"` // mean
	SlowestMS    float64 `json:"slowest_invocation_ms"`
	SlowestPass  float64 `json:"slowest_pass_ms"`
	LogBytes     float64 `json:"log_bytes_per_invocation"`
	// One drain of every dead-letter queue (consumer.Drain), every consumer.DefaultDrainInterval.
	DrainSQSCalls float64 `json:"drain_sqs_calls"`
	DrainMS       float64 `json:"drain_ms"`
	DrainErr      string  `json:"drain_error,omitempty"`
	// The time budget: an invocation's passes end within its minute (consumerfn.Period less
	// its margin), each pass within its timeout (consumer.DefaultPassTimeout), a drain within
	// its bound (drainBudget). IntervalMS, the time between two passes of a lambda
	// (consumerfn.DefaultInterval), is what a round of passes over every lambda takes at most
	// if every lambda is to keep its poll interval while busy: printed, not judged.
	BudgetMS      float64 `json:"budget_ms"`
	PassBudgetMS  float64 `json:"pass_budget_ms"`
	DrainBudgetMS float64 `json:"drain_budget_ms"`
	IntervalMS    float64 `json:"interval_ms"`
}

// drainBudget is the consumer's bound on one drain (consumer.drainTimeout, unexported).
const drainBudget = 30 * time.Second

// Fits reports whether the run kept its time budget: every invocation's passes within its
// minute, every pass within its timeout, none failed, and the drain whole within its bound.
func (r ScaleRun) Fits() bool {
	return r.SlowestMS <= r.BudgetMS && r.SlowestPass <= r.PassBudgetMS && r.FailedPasses == 0 &&
		r.DrainErr == "" && r.DrainMS <= r.DrainBudgetMS
}

// passClock records the slowest pass (consumer.PassMetrics).
type passClock struct {
	mu      sync.Mutex
	slowest time.Duration
}

func (p *passClock) Pass(_ string, took time.Duration, _ bool) {
	p.mu.Lock()
	p.slowest = max(p.slowest, took)
	p.mu.Unlock()
}

// generatedLambdas are n lambdas of the default priorities, named as a registry would.
func generatedLambdas(n int) []task.Lambda {
	ls := make([]task.Lambda, n)
	for i := range ls {
		ls[i] = task.Lambda{Name: fmt.Sprintf("gen-%03d", i)}.WithDefaults()
	}
	return ls
}

// scaleRun measures the deployed consumer function over n idle lambdas of shards shards:
// invocations invocations of its handler, then one drain.
func scaleRun(ctx context.Context, cfg aws.Config, n, shards, invocations int) (ScaleRun, error) {
	lambdas := generatedLambdas(n)
	r := ScaleRun{Lambdas: n, Priorities: len(lambdas[0].Priorities), Shards: shards, Invocations: invocations,
		BudgetMS: ms(consumerfn.Period - consumerfn.DefaultMargin), PassBudgetMS: ms(consumer.DefaultPassTimeout),
		DrainBudgetMS: ms(drainBudget), IntervalMS: ms(consumerfn.DefaultInterval)}
	clock := &passClock{}
	rig, err := newConsumerRig(ctx, cfg, "atf-bench-scale", lambdas, lambdas, shards, ConsumerMemoryMB, consumerfn.Period, clock)
	if err != nil {
		return r, err
	}
	defer rig.b.drop()
	p, fn, c, cons := rig.probe, rig.fn, rig.c, rig.runner
	// A first invocation warms the connections and learns the queues' URLs, as a function's first
	// invocation after a cold start does; it is not counted.
	if err := rig.invoke(ctx, time.Now()); err != nil {
		return r, err
	}
	p.reset()
	fn.reset()
	*cons = countingRunner{c: c}
	clock.slowest = 0
	var took, slowest time.Duration
	for range invocations {
		start := time.Now()
		if err := rig.invoke(ctx, start); err != nil {
			return r, err
		}
		d := time.Since(start)
		took += d
		slowest = max(slowest, d)
	}
	per := 1 / float64(invocations)
	r.PassesPerInvocation = float64(cons.passes) * per
	r.LooksPerInvocation = float64(cons.looks) * per
	r.FailedPasses = cons.failed
	r.CallsPerInvocation = map[string]OpCount{}
	for op, x := range p.snapshot() {
		x = scaleOp(x, per)
		r.CallsPerInvocation[op] = x
		r.ReadUnits += x.Read
		switch service(op) {
		case "DynamoDB":
			r.DynamoDBCall += x.Calls
		case "SQS":
			r.SQSCalls += x.Calls
		}
	}
	r.InvocationMS, r.SlowestMS, r.SlowestPass = ms(took)*per, ms(slowest), ms(clock.slowest)
	r.LogBytes = float64(fn.logBytes.Load())*per + LambdaPlatformLogBytes

	// The drain: the first one learns the dead-letter queues' URLs; the second is measured.
	_, _ = c.Drain(ctx)
	p.reset()
	start := time.Now()
	if _, err := c.Drain(ctx); err != nil {
		r.DrainErr = summary(err)
	}
	r.DrainMS = ms(time.Since(start))
	for op, x := range p.snapshot() {
		if service(op) == "SQS" {
			r.DrainSQSCalls += x.Calls
		}
	}
	return r, nil
}

// summary is err's first line, and how many more it has: a drain joins an error per queue.
func summary(err error) string {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		return lines[0]
	}
	return fmt.Sprintf("%s, and %d more", lines[0], len(lines)-1)
}

// service is the service of an operation as the probe names it: "DynamoDB.Query" is DynamoDB's.
func service(op string) string {
	s, _, _ := strings.Cut(op, ".")
	return s
}

// runScale measures the consumer at each of scaleLambdas and bills the idle environment of
// billLambdas lambdas.
func runScale(ctx context.Context, r *Results, sz sizes, envPath string) error {
	cfg, err := awsConfig(ctx)
	if err != nil {
		log.Printf("scale: not measured: %v", err)
		return nil
	}
	envs, err := loadEnvironments(envPath)
	if err != nil {
		return err
	}
	for _, n := range sz.scale {
		log.Printf("scale: idle consumer over %d lambdas, %d shards, %d invocations", n, envs["dev"].Shards, sz.idleInvocations)
		run, err := scaleRun(ctx, cfg, n, envs["dev"].Shards, max(sz.idleInvocations, 1))
		if err != nil {
			return fmt.Errorf("scale, %d lambdas: %w", n, err)
		}
		log.Printf("scale: %d lambdas: %.0f RRU and %.0f DynamoDB calls an invocation, %.0f ms (slowest %.0f ms, slowest pass %.0f ms); drain: %.0f SQS calls in %.0f ms",
			n, run.ReadUnits, run.DynamoDBCall, run.InvocationMS, run.SlowestMS, run.SlowestPass, run.DrainSQSCalls, run.DrainMS)
		r.Scale = append(r.Scale, run)
		if n == billLambdas {
			// prod's 16 shards would read more than the 4 measured: docs/capacity.md has the formula.
			for _, name := range []string{"dev", "staging"} {
				bill := scaleBill(run, name, envs[name])
				r.ScaleBills = append(r.ScaleBills, bill)
			}
		}
	}
	return nil
}

// Per-lambda resources of the stack (infra/stack), counted from its code, since the bench does
// not import the infra module: a function lambda of P priorities has P queues, each with an event
// source mapping and a dead-letter queue, a worker and a status function; with alarms on
// (staging, prod: infra/environments.json), alarms.go adds per lambda one alarm on its dead-letter
// queues (a math expression over P metrics), one on dead tasks, one on the delivery p95, and
// status.go two on the status function (throttles, errors); and two per environment (consumer
// errors, store errors). Every alarm has a period of 5 minutes (metrics.go's alarmPeriod): standard
// resolution.
const (
	alarmsPerLambdaFixed  = 1 + 1 + 2 // dead tasks, delivery p95, status throttles and errors
	alarmsPerEnvironment  = 2         // consumer errors, store errors
	functionsPerLambda    = 2         // worker, status
	natPublicIPsPerGatewy = 1
)

// ScaleBill is the idle bill of an environment of generated lambdas: the per-lambda resources
// of the stack, counted from its code, and the consumer as measured; a month of it.
type ScaleBill struct {
	Environment string     `json:"environment"` // whose configuration (alarms, NAT gateways)
	Lambdas     int        `json:"lambdas"`
	Priorities  int        `json:"priorities"`
	Shards      int        `json:"shards"`
	Lines       []BillLine `json:"lines"`
	Total       float64    `json:"usd_per_month"`
	PerLambda   float64    `json:"usd_per_lambda_month"`
	// PerLambdaWithoutNAT leaves out the NAT gateways, which an environment pays once however
	// many lambdas it has.
	PerLambdaWithoutNAT float64 `json:"usd_per_lambda_month_without_nat"`
}

// scaleBill prices a month of the idle environment run measured, with env's configuration.
func scaleBill(run ScaleRun, name string, env environment) ScaleBill {
	b := ScaleBill{Environment: name, Lambdas: run.Lambdas, Priorities: run.Priorities, Shards: run.Shards}
	add := func(kind, basis string, usd float64) {
		b.Lines = append(b.Lines, BillLine{Kind: kind, Basis: basis, USD: usd})
	}
	L, P := float64(run.Lambdas), float64(run.Priorities)
	queues := L * P
	polls := ESMIdlePollers * hoursPerMonth * 3600 / SQSLongPollWaitSeconds
	add("idle SQS polls of the event source mappings (counted, not measured)",
		fmt.Sprintf("%s queues × %s requests × $%g/M", trim(queues), num(polls), cost.SQSStandardPerMillion), queues*polls*cost.SQSStandardPerMillion/1e6)
	drains := hoursPerMonth * 3600 / consumer.DefaultDrainInterval.Seconds()
	add("dead-letter drains: SQS requests (measured)",
		fmt.Sprintf("%s drains × %s requests", num(drains), trim(run.DrainSQSCalls)), drains*run.DrainSQSCalls*cost.SQSStandardPerMillion/1e6)
	invocations := month.Minutes() / consumerfn.Period.Minutes()
	gbs := invocations*cost.GBSeconds(math.Ceil(run.InvocationMS), ConsumerMemoryMB) + drains*cost.GBSeconds(math.Ceil(run.DrainMS), ConsumerMemoryMB)
	add("consumer invocations (measured time)",
		fmt.Sprintf("%s invocations of %.0f ms, and %s drains of %.0f ms, at %d MB (%s GB-s)", num(invocations), run.InvocationMS, num(drains), run.DrainMS, ConsumerMemoryMB, num(gbs)),
		invocations*cost.LambdaRequestsPerMillion/1e6+gbs*cost.LambdaArmPerGBSecond)
	reads := invocations * run.ReadUnits
	add("consumer reads (measured)", fmt.Sprintf("%s read units (%.1f an invocation) × $%g/M", num(reads), run.ReadUnits, cost.DynamoDBReadPerMillion), reads*cost.DynamoDBReadPerMillion/1e6)
	logGB := invocations * run.LogBytes / (1 << 30)
	add("consumer log ingestion (measured)", fmt.Sprintf("%.4f GB × $%g", logGB, cost.CloudWatchLogsPerGB), logGB*cost.CloudWatchLogsPerGB)
	months := float64(CloudWatchLogsRetentionUnsetMonths)
	if env.LogRetentionDays > 0 {
		months = float64(env.LogRetentionDays) / 30.4
	}
	add("consumer log storage", fmt.Sprintf("%.4f GB-months (kept %d days) × $%g", logGB*months, env.LogRetentionDays, CloudWatchLogsStoragePerGBMonth),
		logGB*months*CloudWatchLogsStoragePerGBMonth)
	add("worker and status functions", fmt.Sprintf("%s functions, no invocation while idle", trim(L*functionsPerLambda)), 0)
	add("dashboard", fmt.Sprintf("one of the free %d", CloudWatchFreeDashboards), 0)
	if env.Alarms != nil {
		metrics := L*(P+alarmsPerLambdaFixed) + alarmsPerEnvironment
		add("alarms (counted from infra/stack)", fmt.Sprintf("%s alarm metrics (%s a lambda, %d for the environment) × $%g",
			trim(metrics), trim(P+alarmsPerLambdaFixed), alarmsPerEnvironment, CloudWatchAlarmPerMetricMonth), metrics*CloudWatchAlarmPerMetricMonth)
	} else {
		add("alarms", "none in this environment's configuration", 0)
	}
	nat := 0.0
	if g := float64(env.NATGateways); g > 0 {
		nat = g * hoursPerMonth * (NATGatewayPerHour + natPublicIPsPerGatewy*PublicIPv4PerHour)
		add("NAT gateways and their addresses (once per environment)", fmt.Sprintf("%s × %.0f h × $%g", trim(g), hoursPerMonth, NATGatewayPerHour+PublicIPv4PerHour), nat)
	}
	for _, l := range b.Lines {
		b.Total += l.USD
	}
	b.PerLambda = b.Total / L
	b.PerLambdaWithoutNAT = (b.Total - nat) / L
	return b
}

// Print writes the bill as a markdown table.
func (b *ScaleBill) Print(w io.Writer) {
	fmt.Fprintf(w, "Idle environment of %d lambdas of %d priorities, %d shards, %s configuration, per month; list prices checked %s\n\n",
		b.Lambdas, b.Priorities, b.Shards, b.Environment, IdlePricesChecked)
	fmt.Fprintln(w, "| resource | basis | per month |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, l := range b.Lines {
		fmt.Fprintf(w, "| %s | %s | %s |\n", l.Kind, l.Basis, usd(l.USD))
	}
	fmt.Fprintf(w, "| **total** | | **%s** |\n", usd(b.Total))
	fmt.Fprintf(w, "| **per lambda** | target ≤ $1.00 | **%s** (%s without the NAT gateways): %s |\n\n", usd(b.PerLambda), usd(b.PerLambdaWithoutNAT), metWord(b.PerLambda <= 1))
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// printScale writes the consumer's measurements at each size and the budget check.
func printScale(w io.Writer, runs []ScaleRun) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintln(w, "Idle consumer function over generated lambdas (DynamoDB Local + moto): one invocation is one idle minute")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| lambdas × priorities × shards | passes + looks | DynamoDB calls | read units | per lambda | SQS calls | invocation (slowest) | slowest pass | drain: SQS calls, time |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		drain := fmt.Sprintf("%.0f, %.0f ms", r.DrainSQSCalls, r.DrainMS)
		if r.DrainErr != "" {
			drain += " (failed: " + r.DrainErr + ")"
		}
		fmt.Fprintf(w, "| %d × %d × %d | %.0f + %.0f | %.0f | %.1f | %.2f | %.0f | %.0f ms (%.0f ms) | %.0f ms | %s |\n",
			r.Lambdas, r.Priorities, r.Shards, r.PassesPerInvocation, r.LooksPerInvocation, r.DynamoDBCall, r.ReadUnits,
			r.ReadUnits/float64(r.Lambdas), r.SQSCalls, r.InvocationMS, r.SlowestMS, r.SlowestPass, drain)
	}
	fmt.Fprintln(w)
	for _, r := range runs {
		if r.Lambdas != budgetLambdas {
			continue
		}
		fmt.Fprintf(w, "consumer pass over %d lambdas of %d priorities within its time budget (the passes of an invocation within %.0f s, each within %.0f s, none failed; the drain whole within %.0f s): %s: slowest invocation %.0f ms, slowest pass %.0f ms, %d failed passes, drain %.0f ms%s. A round of passes over every lambda took %.1f × the %.0f ms poll interval.\n\n",
			r.Lambdas, r.Priorities, r.BudgetMS/1000, r.PassBudgetMS/1000, r.DrainBudgetMS/1000, passWord(r.Fits()),
			r.SlowestMS, r.SlowestPass, r.FailedPasses, r.DrainMS, drainFailure(r), r.SlowestMS/r.IntervalMS, r.IntervalMS)
	}
}

func drainFailure(r ScaleRun) string {
	if r.DrainErr == "" {
		return ""
	}
	return " (failed: " + r.DrainErr + ")"
}

func passWord(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
