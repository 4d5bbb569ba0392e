package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// IdleResult is the consumer function's cost in one environment with nothing to do: its
// invocations as measured on the emulators, priced for a month at the memory and the schedule
// of the dev template (or the stack's defaults without one).
type IdleResult struct {
	Lambdas             []string           `json:"lambdas"`
	Priorities          int                `json:"priorities"` // queues swept, over all lambdas
	Shards              int                `json:"shards"`
	Invocations         int                `json:"invocations_measured"`
	PassesPerInvocation float64            `json:"passes_per_invocation"`
	CallsPerInvocation  map[string]OpCount `json:"calls_per_invocation"`
	InvocationMS        float64            `json:"invocation_ms"` // mean, on the emulators
	LogBytes            float64            `json:"log_bytes_per_invocation"`
	MemoryMB            int                `json:"memory_mb"`
	InvocationsPerMonth float64            `json:"invocations_per_month"`
	Usage               cost.Usage         `json:"usage_per_month"`
	USDPerMonth         map[string]float64 `json:"usd_per_month_by_service"`
	Total               float64            `json:"usd_per_month"`
}

// month is 730 hours, as AWS prices a month.
const month = 730 * time.Hour

// idleCost invokes the consumer function's handler as the deployed function runs it
// (consumerfn.Deployed) on an empty table for the lambdas of the
// registry, invocations times, and prices a month of it: memoryMB and period from the template
// (zero: the stack's defaults).
func idleCost(ctx context.Context, cfg aws.Config, reg *registry.Registry, shards, invocations, memoryMB int, period time.Duration) (IdleResult, error) {
	if memoryMB == 0 {
		memoryMB = ConsumerMemoryMB
	}
	if period == 0 {
		period = consumerfn.Period
	}
	var lambdas []task.Lambda
	r := IdleResult{Shards: shards, MemoryMB: memoryMB}
	for _, e := range reg.Lambdas {
		l := e.Lambda().WithDefaults()
		lambdas = append(lambdas, l)
		r.Lambdas = append(r.Lambdas, l.Name)
		r.Priorities += len(l.Priorities)
	}
	rig, err := newConsumerRig(ctx, cfg, "atf-bench-idle", lambdas, nil, shards, memoryMB, period, nil)
	if err != nil {
		return r, err
	}
	defer rig.b.drop()
	p, fn, cons := rig.probe, rig.fn, rig.runner
	var took time.Duration
	for range invocations {
		start := time.Now()
		if err := rig.invoke(ctx, start); err != nil {
			return r, err
		}
		took += time.Since(start)
	}
	r.Invocations = invocations
	per := 1 / float64(invocations)
	r.PassesPerInvocation = float64(cons.passes) * per
	r.CallsPerInvocation = map[string]OpCount{}
	var readUnits float64
	for op, x := range p.snapshot() {
		r.CallsPerInvocation[op] = scaleOp(x, per)
		readUnits += x.Read * per
	}
	r.InvocationMS = ms(took) * per
	r.LogBytes = float64(fn.logBytes.Load())*per + LambdaPlatformLogBytes

	r.InvocationsPerMonth = month.Minutes() / period.Minutes()
	r.Usage = cost.Usage{
		ReadUnits: readUnits * r.InvocationsPerMonth,
		Lambda: map[string]cost.LambdaUse{"consumer": {
			Invocations: r.InvocationsPerMonth, GBSeconds: r.InvocationsPerMonth * cost.GBSeconds(math.Ceil(r.InvocationMS), memoryMB),
		}},
		EventBridgeEvents: r.InvocationsPerMonth,
		LogBytes:          r.InvocationsPerMonth * r.LogBytes,
	}
	r.USDPerMonth = r.Usage.Cost()
	r.Total = cost.Total(r.USDPerMonth)
	return r, nil
}

// consumerRig is the consumer function over a table and queues of its own on the emulators,
// its AWS calls counted by probe; b.drop deletes them.
type consumerRig struct {
	b       *backend
	probe   *probe
	fn      *function
	c       *consumer.Consumer
	runner  *countingRunner
	handler *consumerfn.Handler
	// metricsClock is the time of fn's EMF recorder: a period later after each invocation, so
	// that each writes the units lines of the deployed function's, invoked once a period.
	metricsClock clock
	period       time.Duration
}

// newConsumerRig makes the rig of a consumer sweeping lambdas, invoked every period; queues are
// the lambdas whose queues it creates (a consumer that finds nothing to send needs none). passes,
// if set, observes the passes besides the function's EMF recorder.
func newConsumerRig(ctx context.Context, cfg aws.Config, prefix string, lambdas, queues []task.Lambda, shards, memoryMB int, period time.Duration, passes consumer.PassMetrics) (*consumerRig, error) {
	b, err := newBackend(ctx, cfg, prefix, queues...)
	if err != nil {
		return nil, err
	}
	rig := &consumerRig{b: b, probe: newProbe(newShadow(dynamostore.TableInput(b.name))), fn: newFunction("consumer", memoryMB, true), period: period}
	rig.fn.emf.SetClock(rig.metricsClock.now)
	// The recorder counts the units the probe computes rather than those DynamoDB Local reports
	// (reportConsumed): it reports none for the empty Queries of an idle pass, DynamoDB half a
	// unit or more, so that the deployed consumer writes the units line of every lambda it reads.
	rig.probe.consumed = rig.fn.consumed
	watched := cfg.Copy()
	rig.probe.attach(&watched)
	store, err := dynamostore.New(dbClient(watched), dynamostore.Config{Table: b.name, Shards: shards})
	if err != nil {
		b.drop()
		return nil, err
	}
	queue, err := b.queue(watched)
	if err != nil {
		b.drop()
		return nil, err
	}
	var observers passObservers = []consumer.PassMetrics{rig.fn.emf}
	if passes != nil {
		observers = append(observers, passes)
	}
	rig.c = consumer.New(metrics.Wrap(store, rig.fn.emf), queue, consumer.Config{Lambdas: task.FixedCatalog(lambdas), Logger: rig.fn.logger(), Metrics: observers})
	rig.runner = &countingRunner{c: rig.c}
	rig.handler = consumerfn.New(rig.runner, consumerfn.Deployed(rig.fn.logger()))
	return rig, nil
}

// invoke is one invocation of the function, its event's time start, ended as its main ends it
// (Invoked); the metrics' clock then moves on to the next invocation's time.
func (rig *consumerRig) invoke(ctx context.Context, start time.Time) (err error) {
	rig.fn.invoke(func() { err = rig.handler.Handle(ctx, events.EventBridgeEvent{Time: start}) })
	rig.metricsClock.skip(rig.period)
	return err
}

// passObservers observes each pass with every one of its PassMetrics.
type passObservers []consumer.PassMetrics

func (o passObservers) Pass(lambda string, took time.Duration, failed bool) {
	for _, m := range o {
		m.Pass(lambda, took, failed)
	}
}

// countingRunner is the consumer as the function runs it, counting its passes, its looks ahead
// and its failed passes.
type countingRunner struct {
	c                     *consumer.Consumer
	passes, looks, failed int
}

func (r *countingRunner) Sweep(ctx context.Context) (consumer.Stats, error) { return r.c.Sweep(ctx) }

func (r *countingRunner) Run(ctx context.Context, p consumer.RunParams) consumer.RunStats {
	rs := r.c.Run(ctx, p)
	r.passes += rs.Passes
	r.looks += rs.Looks
	r.failed += rs.Failed
	return rs
}

// runIdle measures the idle consumer and bills the idle dev environment: the template's
// standing charges and the consumer as measured.
func runIdle(ctx context.Context, r *Results, sz sizes, regPath, envPath, templatePath string) error {
	cfg, err := awsConfig(ctx)
	if err != nil {
		r.AWSNote = err.Error()
		log.Printf("idle: not measured: %v", err)
		return nil
	}
	env, tplErr := loadStacks(templatePath)
	if tplErr != nil {
		log.Printf("idle: %v; the bill has the consumer alone", tplErr)
	}
	memoryMB, period := 0, time.Duration(0)
	if len(env) > 0 {
		if memoryMB, period, err = env[0].consumer(); err != nil {
			return err
		}
	}
	reg, err := registry.Load(regPath)
	if err != nil {
		return err
	}
	shards, err := devShards(envPath)
	if err != nil {
		return err
	}
	log.Printf("idle consumer: %d invocations", sz.idleInvocations)
	idle, err := idleCost(ctx, cfg, reg, shards, sz.idleInvocations, memoryMB, period)
	if err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	bill := idleBill(env, idle)
	if tplErr != nil {
		bill.Note = tplErr.Error()
	}
	bill.Template = templatePath
	r.Idle, r.IdleBill, r.IdleUSDPerMonth = &idle, &bill, bill.Total
	return nil
}
