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
//
// The format is a few lines of JSON (see the specification in CloudWatch's documentation), so it
// is written here rather than through a library: there is no AWS-kept one for Go, and the
// community ones buffer per logger and flush explicitly, which a function would have to do before
// every return.
package emf

import (
	"encoding/json"
	"io"
	"sync"
	"time"

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
)

// Recorder writes metrics as EMF lines. It is safe for concurrent use.
type Recorder struct {
	mu        sync.Mutex
	w         io.Writer
	namespace string
	now       func() time.Time
}

var _ metrics.Recorder = (*Recorder)(nil)

// New returns a Recorder writing to w (a function's log: stderr, as its JSON logger) in namespace.
func New(w io.Writer, namespace string) *Recorder {
	return &Recorder{w: w, namespace: namespace, now: time.Now}
}

// metric is one metric of a line: its name, unit and value.
type metric struct {
	name, unit string
	value      float64
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
	r.write([][]string{{"Lambda", "Event"}}, map[string]string{"Lambda": lambda, "Event": string(event)},
		metric{TaskEvents, "Count", float64(n)})
}

func (r *Recorder) Delivery(lambda string, latency time.Duration) {
	r.write(byLambda, map[string]string{"Lambda": lambda}, metric{DeliveryLatency, "Milliseconds", ms(latency)})
}

func (r *Recorder) HandlerRan(lambda, outcome string, took time.Duration) {
	r.write(byLambda, map[string]string{"Lambda": lambda, "Outcome": outcome}, metric{HandlerDuration, "Milliseconds", ms(took)})
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
