package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/openatf/atf/shared/adapter/apifn"
	"github.com/openatf/atf/shared/adapter/consumerfn"
	"github.com/openatf/atf/shared/adapter/emf"
	"github.com/openatf/atf/shared/adapter/eventsource"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/adapter/sqsworker"
	"github.com/openatf/atf/shared/adapter/statusfn"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/queue/sqsqueue"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/service/consumer"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/service/status"
	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// awsConfig is the SDK config of the emulators that `make bench` starts, from the environment;
// an error if the environment points nowhere, so that the benchmark never talks to AWS itself.
func awsConfig(ctx context.Context) (aws.Config, error) {
	for _, v := range []string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"} {
		if os.Getenv(v) == "" && os.Getenv("AWS_ENDPOINT_URL") == "" {
			return aws.Config{}, fmt.Errorf("%s is not set: start the emulators (eval \"$(localstack/emulators start)\")", v)
		}
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, err
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return cfg, nil
}

// dbClient is the store's client; DynamoDB Local sends no CRC32 header on errors.
func dbClient(cfg aws.Config, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	opts = append([]func(*dynamodb.Options){func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }}, opts...)
	return dynamostore.NewClient(cfg, opts...)
}

// backend is a table and the queues of some lambdas, named name, deleted by drop.
type backend struct {
	cfg  aws.Config
	name string
}

func newBackend(ctx context.Context, cfg aws.Config, prefix string, lambdas ...task.Lambda) (*backend, error) {
	b := &backend{cfg: cfg, name: prefix + "-" + strings.ToLower(rand.Text()[:8])}
	if err := dynamostore.CreateTable(ctx, dbClient(cfg), b.name); err != nil {
		return nil, err
	}
	q, err := b.queue(cfg)
	if err != nil {
		b.drop()
		return nil, err
	}
	if err := q.Create(ctx, lambdas...); err != nil {
		b.drop()
		return nil, err
	}
	return b, nil
}

func (b *backend) store(cfg aws.Config, opts ...func(*dynamodb.Options)) (*dynamostore.Store, error) {
	return dynamostore.New(dbClient(cfg, opts...), dynamostore.Config{Table: b.name})
}

func (b *backend) queue(cfg aws.Config) (*sqsqueue.Queue, error) {
	return sqsqueue.New(sqs.NewFromConfig(cfg), sqsqueue.Config{Prefix: b.name, Logger: warnLogger()})
}

func (b *backend) drop() {
	ctx := context.Background()
	_ = dynamostore.DeleteTable(ctx, dbClient(b.cfg), b.name) // best effort, as is the rest
	q := sqs.NewFromConfig(b.cfg)
	if out, err := q.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: &b.name}); err == nil {
		for _, url := range out.QueueUrls {
			_, _ = q.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: &url})
		}
	}
}

// emulatedLatency measures delivery latency through the AWS function handlers on the emulators,
// as `atf dev --backend aws --functions` runs them: the consumer function sweeping every second,
// an SQS event source mapping per queue, the worker function claiming through the status
// function.
func emulatedLatency(ctx context.Context, cfg aws.Config, rate float64, d time.Duration, concurrency int) (LatencyRun, error) {
	l := task.Lambda{Name: lambdaName, Concurrency: concurrency}.WithDefaults()
	b, err := newBackend(ctx, cfg, "atf-bench-lat", l)
	if err != nil {
		return LatencyRun{}, err
	}
	defer b.drop()
	store, err := b.store(cfg)
	if err != nil {
		return LatencyRun{}, err
	}
	queue, err := b.queue(cfg)
	if err != nil {
		return LatencyRun{}, err
	}
	r := &latencyRecorder{}
	mux := worker.NewMux()
	mux.HandleFunc(lambdaName, r.handle)
	s, err := local.Start(ctx, local.Config{
		Addr: "127.0.0.1:0", Store: store, Queue: queue, Mux: mux, Concurrency: concurrency, Logger: warnLogger(),
		Functions: &local.Functions{SQS: sqs.NewFromConfig(cfg), QueuePrefix: b.name},
	})
	if err != nil {
		return LatencyRun{}, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Stop(sctx)
	}()
	run, err := measureLatency(ctx, newClient("http://"+s.Addr()), r, "emulated", "elat-", rate, d, 2*time.Second, 60*time.Second)
	run.Notes = "DynamoDB Local and moto on this machine; the consumer function sweeps once a second"
	return run, err
}

// metricsNamespace is the namespace of the functions' EMF lines, as the stack names that of an
// environment called prod (atf/<environment>): its length is in every line's bytes.
const metricsNamespace = "atf/prod"

// function is one AWS Lambda function as the harness runs it in-process: each call of invoke is
// an invocation, billed by its wall time rounded up to the millisecond, and its logger and its
// EMF recorder count the bytes the function would send to CloudWatch Logs.
type function struct {
	name     string
	memoryMB int
	logBytes atomic.Int64
	// emf is the function's metrics recorder, writing into its log as awsfn.Open makes it.
	emf *emf.Recorder
	// writesUnits: the function ends each invocation with the recorder's Invoked, as every
	// function does (awsfn.Start with Clients.Invoked).
	writesUnits bool

	mu          sync.Mutex
	invocations int
	billedMS    float64
	copyTo      io.Writer // tests: what the function logs, if set (tee)
}

func newFunction(name string, memoryMB int, writesUnits bool) *function {
	f := &function{name: name, memoryMB: memoryMB, writesUnits: writesUnits}
	f.emf = emf.New(f, metricsNamespace)
	return f
}

func (f *function) invoke(fn func()) {
	start := time.Now()
	fn()
	f.invoked()
	ms := math.Ceil(float64(time.Since(start)) / float64(time.Millisecond))
	f.mu.Lock()
	f.invocations++
	f.billedMS += ms
	f.mu.Unlock()
}

func (f *function) Write(p []byte) (int, error) {
	f.logBytes.Add(int64(len(p)))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.copyTo != nil {
		_, _ = f.copyTo.Write(p)
	}
	return len(p), nil
}

// tee has the function copy what it logs from now on to w as well.
func (f *function) tee(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.copyTo = w
}

// logger is the function's logger as awsfn.Logger makes it: JSON records, info and up.
func (f *function) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(f, nil)) }

// invoked ends an invocation as the function's main does (awsfn.Start's after).
func (f *function) invoked() {
	if f.writesUnits {
		f.emf.Invoked()
	}
}

// reportConsumed is the option of the function's DynamoDB client that adds each call's units to
// its recorder (consumed).
func (f *function) reportConsumed() func(*dynamodb.Options) {
	return dynamostore.ReportConsumed(f.consumed)
}

// consumed adds a DynamoDB call's units to the function's recorder, by the lambda the metrics
// wrapper names (as awsfn.Open).
func (f *function) consumed(ctx context.Context, u cost.Units) {
	f.emf.Consumed(metrics.LambdaOf(ctx), u)
}

type usageSnapshot struct {
	invocations int
	billedMS    float64
	logBytes    int64
}

func (f *function) snapshot() usageSnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return usageSnapshot{f.invocations, f.billedMS, f.logBytes.Load()}
}

func (f *function) reset() {
	f.mu.Lock()
	f.invocations, f.billedMS = 0, 0
	f.mu.Unlock()
	f.logBytes.Store(0)
}

// timedInvoker is the worker's way to the status function: each Invoke an invocation of it,
// which the statusfn.Client makes of the calls it gathered (one call, or a batch).
type timedInvoker struct {
	fn    *function
	local statusfn.LocalInvoker
}

func (t timedInvoker) Invoke(ctx context.Context, payload []byte) (out []byte, err error) {
	t.fn.invoke(func() { out, err = t.local.Invoke(ctx, payload) })
	return out, err
}

// clock is the harness's time: the wall clock, moved forward on demand (an hour passes at once).
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) skip(d time.Duration)    { c.offset.Add(int64(d)) }
func (c *clock) resetTo(d time.Duration) { c.offset.Store(int64(d)) }

// harness runs atf's AWS function handlers on the emulators, each function with its own
// clients, probes and invocation meter, for one lambda declared as entry.
type harness struct {
	back   *backend
	entry  registry.Entry
	lambda task.Lambda
	clock  clock
	shadow *shadow

	api, cons, status, esm            *probe // the AWS calls of each function; esm: the event source mapping's
	apiFn, consFn, statusFn, workerFn *function

	client    *client.Client
	server    *http.Server
	sweeps    *classifyingSweeper
	check     *dynamostore.Store // unwatched: the harness's own reads
	failFirst atomic.Int64       // the handler fails this many attempts of each task (retriably)
	succeeded atomic.Int64
	before    int // successes of earlier cases

	// The consumer function and the event source mappings run from start to close, as on AWS:
	// stopping a long poll midway would leave SQS to hide what it was about to deliver.
	stop  context.CancelFunc
	loops sync.WaitGroup
}

func newHarness(ctx context.Context, cfg aws.Config, entry registry.Entry) (*harness, error) {
	l := entry.Lambda().WithDefaults()
	b, err := newBackend(ctx, cfg, "atf-bench-cost", l)
	if err != nil {
		return nil, err
	}
	h := &harness{back: b, entry: entry, lambda: l, shadow: newShadow(dynamostore.TableInput(b.name))}
	h.api, h.cons, h.status, h.esm = newProbe(h.shadow), newProbe(h.shadow), newProbe(h.shadow), newProbe(h.shadow)
	h.apiFn = newFunction("api", APIMemoryMB, true)
	h.consFn = newFunction("consumer", ConsumerMemoryMB, true)
	h.statusFn = newFunction("status", StatusMemoryMB, true)
	h.workerFn = newFunction("worker", entry.Function.MemoryMB, true)
	watched := func(p *probe) aws.Config {
		c := cfg.Copy()
		p.attach(&c)
		return c
	}
	fail := func(err error) (*harness, error) { h.close(); return nil, err }
	taskCfg := task.Config{}.WithDefaults()

	apiCfg := watched(h.api)
	apiStore, err := b.store(apiCfg, h.apiFn.reportConsumed())
	if err != nil {
		return fail(err)
	}
	apiQueue, err := b.queue(apiCfg)
	if err != nil {
		return fail(err)
	}
	api := apifn.New(httpapi.New(frontend.New(metrics.Wrap(apiStore, h.apiFn.emf), frontend.Config{
		Lambdas: task.FixedCatalog{l}, Task: taskCfg, Now: h.clock.now, Queue: apiQueue, SendFirst: true, Logger: h.apiFn.logger(),
	}), h.apiFn.logger()), h.apiFn.logger())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	h.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.apiFn.invoke(func() { api.ServeHTTP(w, r) })
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.server.Serve(ln) }() // ends with ErrServerClosed when stopped
	h.client = newClient("http://" + ln.Addr().String())

	consCfg := watched(h.cons)
	consStore, err := b.store(consCfg, h.consFn.reportConsumed())
	if err != nil {
		return fail(err)
	}
	consQueue, err := b.queue(consCfg)
	if err != nil {
		return fail(err)
	}
	h.sweeps = &classifyingSweeper{p: h.cons, fn: h.consFn,
		c: consumer.New(metrics.Wrap(consStore, h.consFn.emf), consQueue, consumer.Config{
			Lambdas: task.FixedCatalog{l}, Task: taskCfg, Now: h.clock.now, Logger: h.consFn.logger(), Metrics: h.consFn.emf,
		})}

	statusCfg := watched(h.status)
	statusStore, err := b.store(statusCfg, h.statusFn.reportConsumed())
	if err != nil {
		return fail(err)
	}
	statusQueue, err := b.queue(statusCfg)
	if err != nil {
		return fail(err)
	}
	hsc := status.New(metrics.Wrap(statusStore, h.statusFn.emf), status.Config{Task: taskCfg, Now: h.clock.now, Logger: h.statusFn.logger(), Queue: statusQueue})
	inv := timedInvoker{fn: h.statusFn, local: statusfn.LocalInvoker{Handler: statusfn.NewHandler(hsc, h.statusFn.logger())}}
	// The worker function's own queue client, as workerfn gives it one: it hides each batch until
	// its invocation's end, and brings failed records back sooner.
	workerQueue, err := b.queue(watched(h.esm))
	if err != nil {
		return fail(err)
	}
	wfn, err := sqsworker.New(sqsworker.Config{
		Lambda: l, Status: statusfn.NewClient(inv), Queue: workerQueue, Logger: h.workerFn.logger(), Metrics: h.workerFn.emf,
		Handler: worker.HandlerFunc(func(_ context.Context, t worker.Task) (json.RawMessage, error) {
			if int64(t.Attempt) <= h.failFirst.Load() {
				return nil, errors.New("failing on purpose") // retriable
			}
			h.succeeded.Add(1)
			return nil, nil
		}),
	})
	if err != nil {
		return fail(err)
	}
	if h.check, err = b.store(cfg); err != nil {
		return fail(err)
	}

	ctx, h.stop = context.WithCancel(context.WithoutCancel(ctx))
	esmSQS := sqs.NewFromConfig(watched(h.esm))
	for _, p := range l.Priorities {
		name, err := sqsqueue.QueueName(b.name, l.Name, p)
		if err != nil {
			return fail(err)
		}
		m := eventsource.SQS{
			Client: esmSQS, Queue: name, BatchSize: entry.Function.BatchSize,
			Timeout: l.Timeout + sqsworker.DefaultMargin, Logger: warnLogger(),
			Handler: func(ctx context.Context, e events.SQSEvent) (resp events.SQSEventResponse, err error) {
				h.workerFn.invoke(func() { resp, err = wfn.Handle(ctx, e) })
				return resp, err
			},
		}
		h.loops.Go(func() { _ = m.Run(ctx) })
	}
	h.loops.Go(func() { h.sweeps.run(ctx) })
	return h, nil
}

func (h *harness) close() {
	if h.stop != nil {
		h.stop()
		h.loops.Wait()
	}
	if h.server != nil {
		h.server.Close()
	}
	h.back.drop()
}

func (h *harness) reset() {
	h.sweeps.mu.Lock() // no sweep straddles the reset
	defer h.sweeps.mu.Unlock()
	h.sweeps.workCalls, h.sweeps.idle, h.sweeps.workLogs = nil, 0, 0
	for _, p := range []*probe{h.api, h.cons, h.status, h.esm} {
		p.reset()
	}
	for _, f := range []*function{h.apiFn, h.consFn, h.statusFn, h.workerFn} {
		f.reset()
	}
	h.succeeded.Store(0)
}

// costCase is one way of using atf whose AWS cost the harness measures.
type costCase struct {
	Name     string `json:"name"`
	Title    string `json:"title"`
	Batch    int    `json:"batch"`    // tasks per schedule request
	Delay    string `json:"delay"`    // the schedule request's delay, "" for none
	Failures int    `json:"failures"` // retriable failures before the attempt that succeeds
	Explain  string `json:"explain"`
}

// CaseResult is what a case consumed per task, and what that costs.
type CaseResult struct {
	costCase
	Tasks   int                `json:"tasks"`
	Seconds float64            `json:"seconds"`
	Calls   map[string]OpCount `json:"calls_per_task"` // by Service.Operation
	// IdleSweeps and EmptyReceives happened during the case but belong to the idle cost: sweeps
	// that moved nothing, receives that found nothing.
	IdleSweeps    int        `json:"idle_sweeps"`
	EmptyReceives float64    `json:"empty_receives"`
	Usage         cost.Usage `json:"usage_per_task"`
	// LogBytes is what each function logged per task: its own records, then the platform's
	// START, END and REPORT lines and API Gateway's access log records (estimated).
	LogBytes       map[string]float64 `json:"log_bytes_per_task"`
	USDPerMillion  map[string]float64 `json:"usd_per_million_by_service"`
	TotalPerMillon float64            `json:"usd_per_million"`
}

// runCase schedules n tasks through the API function, then runs the consumer function and the
// worker function (fed by an event source mapping) until every task has succeeded.
func (h *harness) runCase(ctx context.Context, c costCase, n int) (CaseResult, error) {
	h.reset()
	h.clock.resetTo(0)
	h.failFirst.Store(int64(c.Failures))
	start := time.Now()
	prefix := c.Name + "-" + strings.ToLower(rand.Text()[:6]) + "-"
	ids := map[string]bool{}
	for i := 0; i < n; i += c.Batch {
		reqs := make([]client.ScheduleRequest, min(c.Batch, n-i))
		for j := range reqs {
			reqs[j] = client.ScheduleRequest{ID: fmt.Sprintf("%s%d", prefix, i+j), Delay: c.Delay}
			ids[reqs[j].ID] = true
		}
		var err error
		if c.Batch == 1 {
			_, _, err = h.client.Schedule(ctx, lambdaName, reqs[0])
		} else {
			_, _, err = h.client.ScheduleBatch(ctx, lambdaName, reqs)
		}
		if err != nil {
			return CaseResult{}, fmt.Errorf("%s: schedule: %w", c.Name, err)
		}
	}
	if c.Delay != "" {
		d, err := time.ParseDuration(c.Delay)
		if err != nil {
			return CaseResult{}, err
		}
		h.clock.skip(d + time.Second) // the delay passes: every task is due
	}

	// The consumer function and the event source mappings, running all along, take it from here.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var done int
	err := waitUntil(wctx, 50*time.Millisecond, func() (bool, error) {
		if h.succeeded.Load() < int64(n) {
			return false, nil
		}
		counts, err := h.check.Counts(wctx, lambdaName)
		done = counts[task.StatusSuccess] - h.before
		return done >= n, err
	})
	if err != nil {
		return CaseResult{}, fmt.Errorf("%s: %d of %d tasks succeeded: %w", c.Name, done, n, err)
	}
	// Settle: the last results reach the store before the event source deletes their messages.
	time.Sleep(2 * time.Second)
	h.sweeps.mu.Lock()
	defer h.sweeps.mu.Unlock()
	res := h.result(c, n, time.Since(start), ids, h.sweeps)
	h.before += n
	return res, nil
}

// result turns what the probes and functions recorded into per-task usage and cost; the caller
// holds sweeps.mu.
func (h *harness) result(c costCase, n int, took time.Duration, ids map[string]bool, sweeps *classifyingSweeper) CaseResult {
	per := 1 / float64(n)
	esm := h.esm.snapshot()
	empty := esm["SQS.ReceiveMessage"].EmptyReceives
	if r, ok := esm["SQS.ReceiveMessage"]; ok {
		r.Calls -= r.EmptyReceives // idle polling: not the tasks' doing
		r.EmptyReceives = 0
		esm["SQS.ReceiveMessage"] = r
	}
	total := add(add(add(h.api.snapshot(), sweeps.workCalls), h.status.snapshot()), esm)
	calls := map[string]OpCount{}
	var u cost.Usage
	for op, x := range total {
		calls[op] = scaleOp(x, per)
		u.WriteUnits += x.Write * per
		u.ReadUnits += x.Read * per
		if strings.HasPrefix(op, "SQS.") {
			u.SQSRequests += x.Calls * per
		}
	}
	u.Lambda = map[string]cost.LambdaUse{}
	logs := map[string]float64{"consumer": float64(sweeps.workLogs) * per}
	platform := 0.0
	for _, f := range []*function{h.apiFn, h.statusFn, h.workerFn} {
		s := f.snapshot()
		u.Lambda[f.name] = cost.LambdaUse{Invocations: float64(s.invocations) * per, GBSeconds: cost.GBSeconds(s.billedMS, f.memoryMB) * per}
		calls["Lambda.Invoke("+f.name+")"] = OpCount{Calls: float64(s.invocations) * per}
		logs[f.name] = float64(s.logBytes) * per
		platform += float64(s.invocations*LambdaPlatformLogBytes) * per
	}
	apiRequests := float64(h.apiFn.snapshot().invocations)
	calls["APIGateway.Request"] = OpCount{Calls: apiRequests * per}
	u.APIRequests = apiRequests * per
	logs["lambda platform (estimated)"] = platform
	logs["api gateway access log (estimated)"] = apiRequests * APIAccessLogBytes * per
	for _, b := range logs {
		u.LogBytes += b
	}
	retention := dynamostore.DefaultRetention.Hours() / 730 // months a finished task is kept
	u.StorageGBMonths = float64(h.shadow.storedBytes(ids)) * per / (1 << 30) * retention
	usd := u.Scale(1e6).Cost()
	return CaseResult{
		costCase: c, Tasks: n, Seconds: took.Seconds(), Calls: calls, IdleSweeps: sweeps.idle,
		EmptyReceives: empty, Usage: u, LogBytes: logs, USDPerMillion: usd, TotalPerMillon: cost.Total(usd),
	}
}

func scaleOp(x OpCount, f float64) OpCount {
	return OpCount{Calls: x.Calls * f, EmptyReceives: x.EmptyReceives * f, Read: x.Read * f, Write: x.Write * f,
		ReportedRead: x.ReportedRead * f, ReportedWrite: x.ReportedWrite * f}
}

// storedBytes is what the tasks with these ids occupy in the table and its indexes now: items
// and index entries, each with DynamoDB's 100 bytes of overhead.
func (s *shadow) storedBytes(ids map[string]bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, it := range s.items {
		if v := valueString(it["id"]); v == "" || !ids[v[1:]] {
			continue
		}
		n += itemSize(it) + 100
		for _, g := range s.indexes {
			if e := g.entry(it); e != nil {
				n += itemSize(e) + 100
			}
		}
	}
	return n
}

// classifyingSweeper runs the consumer function's handler (consumerfn) as EventBridge would,
// once a minute, and files each sweep's AWS calls as the tasks' work, or as idle when the sweep
// moved nothing: idle sweeps are the consumer's fixed cost, priced apart.
type classifyingSweeper struct {
	c  *consumer.Consumer
	p  *probe
	fn *function

	mu                 sync.Mutex
	workCalls          map[string]OpCount
	idle               int
	workLogs, idleLogs int64
}

func (s *classifyingSweeper) Sweep(ctx context.Context) (consumer.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, logs := s.p.snapshot(), s.fn.logBytes.Load()
	st, err := s.c.Sweep(ctx)
	d := diff(s.p.snapshot(), before)
	dl := s.fn.logBytes.Load() - logs
	if st.Enqueued+st.TimedOut+st.Dead+st.Dropped == 0 {
		s.idle++
		s.idleLogs += dl
	} else {
		s.workCalls = add(s.workCalls, d)
		s.workLogs += dl
	}
	return st, err
}

// run invokes the consumer function until ctx ends; it stops sweeping when ctx ends, rather
// than at its minute's end.
func (s *classifyingSweeper) run(ctx context.Context) {
	h := consumerfn.New(s, consumerfn.Config{Logger: s.fn.logger(), Wait: func(_ context.Context, d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}})
	for ctx.Err() == nil {
		// A context of its own, so that stopping never cuts a sweep short.
		_ = h.Handle(context.WithoutCancel(ctx), events.EventBridgeEvent{Time: time.Now()}) // it logs its errors
		// Its units line, at most one a minute per lambda, is written outside any sweep: a fixed
		// cost of the consumer, not the tasks'.
		s.fn.invoked()
	}
}
