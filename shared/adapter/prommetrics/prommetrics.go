// Package prommetrics keeps atf's metrics for Prometheus (client_golang) and serves them in its
// text format: what `atf dev` serves at /metrics. It is a metrics.Recorder for what happens
// (transitions, delivery latency, handler runs, passes, store errors), and reads what is (tasks
// by status, queue depth) when it is scraped.
//
// The metrics, every one prefixed atf_:
//
//	tasks{lambda,status}                      gauge: tasks in each status, read from the store at each scrape
//	task_transitions_total{lambda,from,to}    counter: tasks moved by a write; from is "" for tasks created
//	task_events_total{lambda,event}           counter: the lifecycle events of those writes (succeeded, dead, ...)
//	delivery_latency_seconds{lambda}          histogram: claim time − run time, first attempts
//	handler_duration_seconds{lambda,outcome}  histogram: handler runs, by how they ended
//	queue_messages{lambda,priority,state}     gauge: messages queued (visible, delayed, in_flight), at each scrape
//	sweep_duration_seconds{lambda}            histogram: the consumer's passes
//	sweep_errors_total{lambda}                counter: passes that failed; at zero from the start for each lambda
//	store_errors_total{op,kind}               counter: store calls that failed for a reason of the store's own;
//	                                          at zero from the start for each op and kind
//
// and the Go runtime's and the process's own (go_*, process_*).
package prommetrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/queue/memqueue"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/task"
)

// CountsTimeout bounds the store reads of one scrape: one Counts call per lambda, one after the
// other.
const CountsTimeout = 10 * time.Second

// Config says where a scrape reads what is.
type Config struct {
	// Lambdas whose tasks are counted by status at each scrape.
	Lambdas []task.Lambda
	// Counts reads a lambda's counts by status: the store (task.Store.Counts). Nil: no atf_tasks.
	Counts func(ctx context.Context, lambda string) (map[task.Status]int, error)
	// Queue, if set, is counted at each scrape: atf_queue_messages.
	Queue  interface{ Sizes() []memqueue.Size }
	Logger *slog.Logger
}

// Metrics is the registry of atf's metrics, and the Recorder that feeds it.
type Metrics struct {
	log         *slog.Logger
	reg         *prometheus.Registry
	transitions *prometheus.CounterVec
	events      *prometheus.CounterVec
	delivery    *prometheus.HistogramVec
	handler     *prometheus.HistogramVec
	sweep       *prometheus.HistogramVec
	sweepErrors *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
	held        *prometheus.CounterVec
}

var _ metrics.Recorder = (*Metrics)(nil)

// Buckets, in seconds. A delivery is due within the consumer's poll interval (about a second) or
// sooner; a handler may run for up to its lambda's timeout (15 minutes at most).
var (
	deliveryBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	handlerBuckets  = []float64{.005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900}
	sweepBuckets    = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
)

// New returns the metrics, registered with the Go runtime's and the process's collectors.
func New(c Config) *Metrics {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	m := &Metrics{
		log: c.Logger,
		reg: prometheus.NewRegistry(),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atf_task_transitions_total", Help: "Tasks moved from one status to another by a store write; from is empty for tasks created.",
		}, []string{"lambda", "from", "to"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atf_task_events_total", Help: "Lifecycle events of the store's writes (scheduled, started, succeeded, retried, failed, dead, ...).",
		}, []string{"lambda", "event"}),
		delivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "atf_delivery_latency_seconds", Help: "How long after its run time a task's first attempt was claimed.", Buckets: deliveryBuckets,
		}, []string{"lambda"}),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "atf_handler_duration_seconds", Help: "How long handlers ran, by outcome (success, retriable, fatal, cancelled, snoozed, stopped).", Buckets: handlerBuckets,
		}, []string{"lambda", "outcome"}),
		sweep: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "atf_sweep_duration_seconds", Help: "How long the consumer's passes over a lambda took.", Buckets: sweepBuckets,
		}, []string{"lambda"}),
		sweepErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atf_sweep_errors_total", Help: "Consumer passes over a lambda that failed.",
		}, []string{"lambda"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atf_store_errors_total", Help: "Store calls that failed for a reason of the store's own (throttled, storage_full, timeout, other).",
		}, []string{"op", "kind"}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atf_starts_held_total", Help: "Claims that a lambda's limit held back (max_running, key_concurrency, rate, key_rate): the task waits, with no attempt counted.",
		}, []string{"lambda", "limit"}),
	}
	// The error counters of every label value known at start exist from the start, at zero, so
	// that an alert on them tells "no error" from "no such series".
	for _, l := range c.Lambdas {
		m.sweepErrors.WithLabelValues(l.Name)
	}
	for _, op := range metrics.StoreOps {
		for _, kind := range metrics.Kinds {
			m.storeErrors.WithLabelValues(op, string(kind))
		}
	}
	m.reg.MustRegister(m.transitions, m.events, m.delivery, m.handler, m.sweep, m.sweepErrors, m.storeErrors, m.held,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&state{cfg: c})
	return m
}

// Handler serves the metrics in Prometheus's text format (or OpenMetrics, if asked for). A
// scrape that cannot read a lambda's counts still serves the rest, and logs why.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 2, // each scrape reads the store once per lambda
		Timeout:             CountsTimeout + 5*time.Second,
	})
}

// Registry is the registry the metrics are in, for tests and for more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) Transitions(lambda string, from, to task.Status, event lifecycle.Type, n int) {
	m.transitions.WithLabelValues(lambda, string(from), string(to)).Add(float64(n))
	if event != "" {
		m.events.WithLabelValues(lambda, string(event)).Add(float64(n))
	}
}

func (m *Metrics) Delivery(lambda string, latency time.Duration) {
	m.delivery.WithLabelValues(lambda).Observe(latency.Seconds())
}

func (m *Metrics) HandlerRan(lambda, outcome string, took time.Duration) {
	m.handler.WithLabelValues(lambda, outcome).Observe(took.Seconds())
}

func (m *Metrics) Pass(lambda string, took time.Duration, failed bool) {
	m.sweep.WithLabelValues(lambda).Observe(took.Seconds())
	if failed {
		m.sweepErrors.WithLabelValues(lambda).Inc()
	}
}

// Held counts a claim that a limit held back (metrics.Recorder).
func (m *Metrics) Held(lambda, limit string) { m.held.WithLabelValues(lambda, limit).Inc() }

func (m *Metrics) StoreError(op string, kind metrics.Kind) {
	m.storeErrors.WithLabelValues(op, string(kind)).Inc()
}

// Consumed is not kept: atf dev's embedded store has no capacity units, and the dashboard prices
// its transitions with DynamoDB's model instead (dashboard.Costs).
func (m *Metrics) Consumed(string, cost.Units) {}

// state collects what is, at each scrape: tasks by status and queue depth.
type state struct{ cfg Config }

var (
	tasksDesc = prometheus.NewDesc("atf_tasks", "Tasks of a lambda in each status, read from the store at the scrape.",
		[]string{"lambda", "status"}, nil)
	queueDesc = prometheus.NewDesc("atf_queue_messages", "Messages in a lambda's queue of one priority, by state (visible, delayed, in_flight).",
		[]string{"lambda", "priority", "state"}, nil)
)

func (s *state) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksDesc
	ch <- queueDesc
}

func (s *state) Collect(ch chan<- prometheus.Metric) {
	if s.cfg.Counts != nil {
		ctx, cancel := context.WithTimeout(context.Background(), CountsTimeout)
		defer cancel()
		for _, l := range s.cfg.Lambdas {
			counts, err := s.cfg.Counts(ctx, l.Name)
			if err != nil {
				s.cfg.Logger.Warn("metrics: could not count tasks", "lambda", l.Name, "err", err)
				ch <- prometheus.NewInvalidMetric(tasksDesc, err)
				continue
			}
			for _, st := range task.Statuses { // every status, with 0 for none: series do not vanish
				ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(counts[st]), l.Name, string(st))
			}
		}
	}
	if s.cfg.Queue != nil {
		for _, q := range s.cfg.Queue.Sizes() {
			ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(q.Visible), q.Lambda, q.Priority, "visible")
			ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(q.Delayed), q.Lambda, q.Priority, "delayed")
			ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(q.InFlight), q.Lambda, q.Priority, "in_flight")
		}
	}
}
