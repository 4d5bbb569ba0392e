// Package emf writes atf's metrics on AWS as CloudWatch Embedded Metric Format: each observation
// is one JSON log line with an "_aws" member, from which CloudWatch Logs extracts the metric as it
// ingests the function's log. Nothing is called on the task path but a write to the log: no
// PutMetricData, no buffer to flush before AWS Lambda freezes the process, nothing lost if it dies.
//
// The metrics, in the namespace the stack gives (atf/<environment>):
//
//	TaskEvents       Count         [Lambda, Event]  the lifecycle events of the store's writes (succeeded, dead, ...)
//	DeliveryLatency  Milliseconds  [Lambda]         claim time − run time, first attempts
//	HandlerDuration  Milliseconds  [Lambda]         handler runs; the line says the Outcome
//	SweepDuration    Milliseconds  [Lambda]         the consumer's passes; with SweepErrors (Count), 1 for a failed pass
//	StoreErrors      Count         [] and [Operation]  store calls that failed for a reason of the store's own; the line says the Kind
//	LambdasReads     Count         []               reads of the lambdas from SSM (package ssmcatalog); with LambdasReadErrors
//	                                                (Count), 1 for a failed read, and LambdasAge (Seconds), the age of the lambdas served
//	WriteUnits        Count         [Lambda]         DynamoDB's write units of the store calls for the lambda (metrics.Recorder.Consumed);
//	                                                with ReadUnits (Count), and Invocations (Count), the function's invocations
//	                                                that made them: the dollars per lambda of the stack's dashboards
//	StartsHeld        Count         [Lambda]         claims a limit held back (metrics.Recorder.Held): the task waits, no
//	                                                attempt counted; written with WriteUnits when there were any
//
// A function's task path (TaskEvents of every task's life: scheduled, started, succeeded;
// DeliveryLatency, HandlerDuration) is held from the end of its first invocation on (Invoked) and
// written at the end of each: TaskEvents summed, a line per lambda and event (the rare events,
// such as dead, which alarms watch, are written at once); the latencies and durations as value arrays (up to MaxValues a line), a line
// per lambda (and outcome). A status function answering a batch of a hundred claims writes a
// handful of lines, not a hundred or more, which were most of a task's log bytes on AWS. What a
// crash loses is one invocation's worth. A process that never ends an invocation (an ECS
// executor) writes each observation at once.
//
// WriteUnits, ReadUnits and Invocations are added up in the process and written at the end of an
// invocation (Invoked), at most once per UnitsEvery: a line per lambda, whatever the tasks, so
// that they cost no log bytes per task. What a process holds when AWS retires it, at most that
// long's worth, is lost: the figures are a lower bound. They are three custom metrics per lambda,
// billed for the hours a lambda's line is written ($0.90 a month for a lambda busy every hour).
//
// The format is a few lines of JSON (see the specification in CloudWatch's documentation), so it
// is written here rather than through a library: there is no AWS-kept one for Go, and the
// community ones buffer per logger and flush explicitly, which a function would have to do before
// every return.
package emf

import (
	"encoding/json"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/task"
)

// Metric names, shared with the stack's alarms and dashboard (infra/stack).
const (
	TaskEvents      = "TaskEvents"
	DeliveryLatency = "DeliveryLatency"
	HandlerDuration = "HandlerDuration"
	SweepDuration   = "SweepDuration"
	SweepErrors     = "SweepErrors"
	StoreErrors     = "StoreErrors"
	// LambdasReads, LambdasReadErrors and LambdasAge: see LambdasRead.
	LambdasReads      = "LambdasReads"
	LambdasReadErrors = "LambdasReadErrors"
	LambdasAge        = "LambdasAge"
	// WriteUnits, ReadUnits and Invocations: see Invoked.
	WriteUnits  = "WriteUnits"
	ReadUnits   = "ReadUnits"
	Invocations = "Invocations"
	// StartsHeld: see Held.
	StartsHeld = "StartsHeld"
)

// UnitsEvery is how often at most a process writes its units and invocations (Invoked).
const UnitsEvery = time.Minute

// Recorder writes metrics as EMF lines. It is safe for concurrent use.
type Recorder struct {
	mu        sync.Mutex
	w         io.Writer
	namespace string
	now       func() time.Time

	// The units and invocations not written yet (Invoked), by lambda; those of the invocation
	// under way are in current.
	unitsMu   sync.Mutex
	current   map[string]cost.Units
	held      map[string]int // claims held back by a limit, by lambda, in the invocation under way
	pending   map[string]spent
	unitsLast time.Time // when they were last written

	// The task path's observations of the invocation under way, once invocations end (held).
	heldMu     sync.Mutex
	holding    bool
	events     map[[2]string]float64   // [lambda, event] -> tasks
	deliveries map[string][]float64    // lambda -> ms
	durations  map[[2]string][]float64 // [lambda, outcome] -> ms
}

// MaxValues is the most values one EMF line gives a metric, CloudWatch's limit.
const MaxValues = 100

// spent is what a lambda's store calls consumed, and in how many invocations.
type spent struct {
	units       cost.Units
	invocations int
	held        int
}

var _ metrics.Recorder = (*Recorder)(nil)

// New returns a Recorder writing to w (a function's log: stderr, as its JSON logger) in namespace.
func New(w io.Writer, namespace string) *Recorder {
	return &Recorder{w: w, namespace: namespace, now: time.Now, current: map[string]cost.Units{}, held: map[string]int{}, pending: map[string]spent{},
		events: map[[2]string]float64{}, deliveries: map[string][]float64{}, durations: map[[2]string][]float64{}}
}

// SetClock has r read the time from now rather than time.Now: for a harness that runs a
// function's invocations closer together than its schedule does (bench). Call it before r is used.
func (r *Recorder) SetClock(now func() time.Time) { r.now = now }

// metric is one metric of a line: its name, unit and value.
type metric struct {
	name, unit string
	value      any // a number, or an array of numbers (values of one metric)
}

type definition struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type directive struct {
	Namespace  string       `json:"Namespace"`
	Dimensions [][]string   `json:"Dimensions"`
	Metrics    []definition `json:"Metrics"`
}

type metadata struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

// write writes one line: members (the dimensions' values and other properties), the metrics'
// values, and the directive that makes them metrics with dims.
func (r *Recorder) write(dims [][]string, members map[string]string, ms ...metric) {
	line := make(map[string]any, len(members)+len(ms)+1)
	for k, v := range members {
		line[k] = v
	}
	defs := make([]definition, len(ms))
	for i, m := range ms {
		defs[i] = definition{Name: m.name, Unit: m.unit}
		line[m.name] = m.value
	}
	line["_aws"] = metadata{
		Timestamp:         r.now().UnixMilli(),
		CloudWatchMetrics: []directive{{Namespace: r.namespace, Dimensions: dims, Metrics: defs}},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return // strings and numbers only: cannot fail
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.w.Write(b) // one write a line, so lines of concurrent writers never mix
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

var byLambda = [][]string{{"Lambda"}}

// Transitions writes the lifecycle event of a write, if it makes one; transitions that make none
// (an enqueue, a release) are left to the Prometheus metrics of atf dev.
func (r *Recorder) Transitions(lambda string, _, _ task.Status, event lifecycle.Type, n int) {
	if event == "" || n <= 0 {
		return
	}
	if heldEvents[event] && r.hold(func() { r.events[[2]string{lambda, string(event)}] += float64(n) }) {
		return
	}
	r.write(byEvent, map[string]string{"Lambda": lambda, "Event": string(event)}, metric{TaskEvents, "Count", float64(n)})
}

func (r *Recorder) Delivery(lambda string, latency time.Duration) {
	if r.hold(func() { r.deliveries[lambda] = append(r.deliveries[lambda], ms(latency)) }) {
		return
	}
	r.write(byLambda, map[string]string{"Lambda": lambda}, metric{DeliveryLatency, "Milliseconds", ms(latency)})
}

func (r *Recorder) HandlerRan(lambda, outcome string, took time.Duration) {
	k := [2]string{lambda, outcome}
	if r.hold(func() { r.durations[k] = append(r.durations[k], ms(took)) }) {
		return
	}
	r.write(byLambda, map[string]string{"Lambda": lambda, "Outcome": outcome}, metric{HandlerDuration, "Milliseconds", ms(took)})
}

var byEvent = [][]string{{"Lambda", "Event"}}

// heldEvents are the events of every task's life, held to the invocation's end; the rest (dead,
// failed, retried, ...) are rare and alarmed on, so each is written at once, whatever ends the
// invocation after it (a timeout, a crash).
var heldEvents = map[lifecycle.Type]bool{lifecycle.Scheduled: true, lifecycle.Started: true, lifecycle.Succeeded: true}

// hold runs add under the lock of the held observations and reports true if the process ends
// invocations (see the package documentation); otherwise it runs nothing.
func (r *Recorder) hold(add func()) bool {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	if r.holding {
		add()
	}
	return r.holding
}

// writeHeld writes the task path's observations held in the invocation that ends, and holds the
// next invocation's from now on.
func (r *Recorder) writeHeld() {
	r.heldMu.Lock()
	r.holding = true
	events, deliveries, durations := r.events, r.deliveries, r.durations
	r.events, r.deliveries, r.durations = map[[2]string]float64{}, map[string][]float64{}, map[[2]string][]float64{}
	r.heldMu.Unlock()
	for _, k := range slices.SortedFunc(maps.Keys(events), compareKeys) {
		r.write(byEvent, map[string]string{"Lambda": k[0], "Event": k[1]}, metric{TaskEvents, "Count", events[k]})
	}
	for _, lambda := range slices.Sorted(maps.Keys(deliveries)) {
		for vs := range slices.Chunk(deliveries[lambda], MaxValues) {
			r.write(byLambda, map[string]string{"Lambda": lambda}, metric{DeliveryLatency, "Milliseconds", values(vs)})
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(durations), compareKeys) {
		for vs := range slices.Chunk(durations[k], MaxValues) {
			r.write(byLambda, map[string]string{"Lambda": k[0], "Outcome": k[1]}, metric{HandlerDuration, "Milliseconds", values(vs)})
		}
	}
}

func compareKeys(a, b [2]string) int {
	if c := strings.Compare(a[0], b[0]); c != 0 {
		return c
	}
	return strings.Compare(a[1], b[1])
}

// values is one value as a number, more as an array: a line of a single observation reads as
// it did before holding.
func values(vs []float64) any {
	if len(vs) == 1 {
		return vs[0]
	}
	return vs
}

func (r *Recorder) Pass(lambda string, took time.Duration, failed bool) {
	errs := 0.0
	if failed {
		errs = 1
	}
	r.write(byLambda, map[string]string{"Lambda": lambda},
		metric{SweepDuration, "Milliseconds", ms(took)}, metric{SweepErrors, "Count", errs})
}

// StoreError writes one store error, as a metric of the whole environment (no dimension: one
// alarm watches it) and of its operation.
func (r *Recorder) StoreError(op string, kind metrics.Kind) {
	r.write([][]string{{}, {"Operation"}}, map[string]string{"Operation": op, "Kind": string(kind)},
		metric{StoreErrors, "Count", 1})
}

// LambdasRead writes one read of the lambdas from SSM (ssmcatalog.Metrics), a metric of the whole
// environment: a failed one, and the age of the lambdas the function serves meanwhile.
func (r *Recorder) LambdasRead(failed bool, age time.Duration) {
	errs := 0.0
	if failed {
		errs = 1
	}
	r.write([][]string{{}}, nil,
		metric{LambdasReads, "Count", 1}, metric{LambdasReadErrors, "Count", errs}, metric{LambdasAge, "Seconds", age.Seconds()})
}

// Consumed adds units of lambda's store calls to the invocation under way (metrics.Recorder).
// Calls of no single lambda (the gates, the failed tasks of every lambda) are not counted.
func (r *Recorder) Consumed(lambda string, u cost.Units) {
	if lambda == "" {
		return
	}
	r.unitsMu.Lock()
	defer r.unitsMu.Unlock()
	r.current[lambda] = r.current[lambda].Plus(u)
}

// Held counts a claim that a limit held back (metrics.Recorder), written with the lambda's units
// in a function (a line per claim would cost log bytes for every return of a held task's
// message), and at once in a process that ends no invocations (an ECS executor).
func (r *Recorder) Held(lambda, _ string) {
	r.heldMu.Lock()
	holding := r.holding
	r.heldMu.Unlock()
	if !holding {
		r.write(byLambda, map[string]string{"Lambda": lambda}, metric{StartsHeld, "Count", 1.0})
		return
	}
	r.unitsMu.Lock()
	defer r.unitsMu.Unlock()
	r.held[lambda]++
}

// Invoked ends an invocation of the function: it writes the task path's observations held in it
// (and holds them from then on: see the package documentation), and each lambda whose store calls
// consumed units in it counts one invocation more. If UnitsEvery has passed since they were last written, it writes
// each lambda's units and invocations since then as one line, and starts them again.
func (r *Recorder) Invoked() {
	r.writeHeld()
	r.unitsMu.Lock()
	for lambda, u := range r.current {
		p := r.pending[lambda]
		r.pending[lambda] = spent{units: p.units.Plus(u), invocations: p.invocations + 1, held: p.held}
	}
	for lambda, n := range r.held {
		p := r.pending[lambda]
		p.held += n
		r.pending[lambda] = p
	}
	clear(r.current)
	clear(r.held)
	now := r.now()
	if len(r.pending) == 0 || now.Sub(r.unitsLast) < UnitsEvery {
		r.unitsMu.Unlock()
		return
	}
	written := r.pending
	r.pending, r.unitsLast = map[string]spent{}, now
	r.unitsMu.Unlock()
	for _, lambda := range slices.Sorted(maps.Keys(written)) {
		p := written[lambda]
		ms := []metric{{WriteUnits, "Count", p.units.Write}, {ReadUnits, "Count", p.units.Read}, {Invocations, "Count", float64(p.invocations)}}
		if p.held > 0 {
			ms = append(ms, metric{StartsHeld, "Count", float64(p.held)})
		}
		r.write(byLambda, map[string]string{"Lambda": lambda}, ms...)
	}
}
