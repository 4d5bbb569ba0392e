package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// lambdaName is the benchmark's one lambda: a Go handler that does nothing.
const lambdaName = "noop"

// devPoll is the consumer's poll interval under `atf dev` (its --poll default).
const devPoll = 100 * time.Millisecond

// batchSize is how many tasks one batch schedule request carries: the API's maximum.
const batchSize = task.MaxBatch

// warnLogger passes the stack's warnings and errors to stderr and drops the rest, as peers do.
func warnLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newClient is an API client that keeps enough connections open for concurrent callers, on the
// client's own transport: it drops idle connections before atf dev closes them.
func newClient(endpoint string) *client.Client {
	tr := client.NewTransport()
	tr.MaxIdleConnsPerHost = 256
	return &client.Client{Endpoint: endpoint, HTTP: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// embeddedStack is `atf dev` in this process on a fresh SQLite file, running h as lambdaName with
// concurrency slots.
type embeddedStack struct {
	stack  *local.Stack
	client *client.Client
	dir    string
}

func startEmbedded(ctx context.Context, concurrency int, h worker.HandlerFunc) (*embeddedStack, error) {
	dir, err := os.MkdirTemp("", "atf-bench-")
	if err != nil {
		return nil, err
	}
	e, err := startEmbeddedAt(ctx, filepath.Join(dir, "atf.db"), concurrency, h)
	if err != nil {
		_ = os.RemoveAll(dir) // a temporary directory: best effort
		return nil, err
	}
	e.dir = dir
	return e, nil
}

// startEmbeddedAt is startEmbedded on the SQLite file at db, which it leaves in place.
func startEmbeddedAt(ctx context.Context, db string, concurrency int, h worker.HandlerFunc) (*embeddedStack, error) {
	mux := worker.NewMux()
	mux.HandleFunc(lambdaName, h)
	s, err := local.Start(ctx, local.Config{
		Addr: "127.0.0.1:0", DBPath: db, Mux: mux, Concurrency: concurrency,
		Task: task.Config{PollInterval: devPoll}, Logger: warnLogger(),
	})
	if err != nil {
		return nil, err
	}
	return &embeddedStack{stack: s, client: newClient("http://" + s.Addr())}, nil
}

func (e *embeddedStack) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.stack.Stop(ctx)
	if e.dir != "" {
		_ = os.RemoveAll(e.dir) // a temporary directory: best effort
	}
}

// successes is how many of the lambda's tasks have succeeded, as the API counts them.
func successes(ctx context.Context, c *client.Client) (int, error) {
	ls, err := c.Lambdas(ctx)
	if err != nil {
		return 0, err
	}
	for _, l := range ls {
		if l.Name == lambdaName {
			return l.Counts[task.StatusSuccess], nil
		}
	}
	return 0, fmt.Errorf("lambda %s is not served", lambdaName)
}

// waitUntil polls done every interval until it reports true, fails, or ctx ends.
func waitUntil(ctx context.Context, interval time.Duration, done func() (bool, error)) error {
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// Throughput is the result of a burn-down run.
type Throughput struct {
	Tasks       int     `json:"tasks"`
	Concurrency int     `json:"concurrency"`
	Batch       int     `json:"batch"`
	ScheduleS   float64 `json:"schedule_s"` // until the last batch was accepted
	TotalS      float64 `json:"total_s"`    // until the last task was recorded as a success
	TasksPerS   float64 `json:"tasks_per_s"`
	Runs        int     `json:"handler_runs"` // more than Tasks would be duplicate runs
	// PeakRSSMB is the peak resident memory of the process from the stack's start to the last
	// success: atf dev's stack and the benchmark's client together, so an upper bound of atf
	// dev's (0 where /proc does not tell).
	PeakRSSMB float64 `json:"peak_rss_mb"`
}

// embeddedThroughput burns down n no-op tasks as the peers do: one goroutine schedules them all
// in batches of 100 through the HTTP API behind a paused gate, then opens the gate, so that the
// workers start on the full backlog; the clock runs from the first schedule request until the
// API counts n successes.
func embeddedThroughput(ctx context.Context, n, concurrency int) (Throughput, error) {
	dir, err := os.MkdirTemp("", "atf-bench-")
	if err != nil {
		return Throughput{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory: best effort
	return burnDown(ctx, filepath.Join(dir, "atf.db"), n, concurrency)
}

// burnDown is embeddedThroughput's run on the SQLite file at db, which may hold tasks already.
func burnDown(ctx context.Context, db string, n, concurrency int) (Throughput, error) {
	var ran atomic.Int64
	rssErr := resetPeakRSS()
	e, err := startEmbeddedAt(ctx, db, concurrency, func(context.Context, worker.Task) (json.RawMessage, error) {
		ran.Add(1)
		return nil, nil
	})
	if err != nil {
		return Throughput{}, err
	}
	defer e.stop()
	if _, err := e.client.SetGate(ctx, lambdaName, "", task.GatePause); err != nil {
		return Throughput{}, err
	}
	start := time.Now()
	reqs := make([]client.ScheduleRequest, batchSize)
	for left := n; left > 0; left -= batchSize {
		if _, _, err := e.client.ScheduleBatch(ctx, lambdaName, reqs[:min(left, batchSize)]); err != nil {
			return Throughput{}, fmt.Errorf("schedule: %w", err)
		}
	}
	scheduled := time.Since(start)
	if _, err := e.client.SetGate(ctx, lambdaName, "", task.GateOpen); err != nil {
		return Throughput{}, err
	}
	err = waitUntil(ctx, 10*time.Millisecond, func() (bool, error) {
		if ran.Load() < int64(n) {
			return false, nil
		}
		ok, err := successes(ctx, e.client)
		return ok >= n, err
	})
	total := time.Since(start)
	if err != nil {
		return Throughput{}, fmt.Errorf("%d of %d tasks ran: %w", ran.Load(), n, err)
	}
	var rss float64
	if rssErr == nil {
		rss, rssErr = peakRSSMB()
	}
	if rssErr != nil {
		log.Printf("peak RSS: not measured: %v", rssErr)
	}
	return Throughput{
		Tasks: n, Concurrency: concurrency, Batch: batchSize, ScheduleS: scheduled.Seconds(),
		TotalS: total.Seconds(), TasksPerS: float64(n) / total.Seconds(), Runs: int(ran.Load()), PeakRSSMB: rss,
	}, nil
}

// LatencyRun is a delivery-latency measurement.
type LatencyRun struct {
	Rate     float64 `json:"rate_per_s"`
	Seconds  float64 `json:"seconds"`
	LeadMS   float64 `json:"lead_ms"`    // run_at is this far after the schedule request
	MaxLagMS float64 `json:"max_lag_ms"` // how far behind its plan the scheduler fell at worst
	Missing  int     `json:"missing"`    // tasks that had not started when the run gave up
	Latency  Latency `json:"latency_ms"` // handler start − run_at, first runs
	Backend  string  `json:"backend"`    // embedded, or emulated (DynamoDB Local + moto)
	Notes    string  `json:"notes,omitempty"`
}

// latencyRecorder records handler start − run_at of each task's first run.
type latencyRecorder struct {
	runAt sync.Map // task id → time.Time
	mu    sync.Mutex
	lat   []time.Duration
	seen  map[string]bool
}

func (r *latencyRecorder) handle(_ context.Context, t worker.Task) (json.RawMessage, error) {
	now := time.Now()
	at, ok := r.runAt.Load(t.ID)
	if !ok {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if !r.seen[t.ID] {
		r.seen[t.ID] = true
		r.lat = append(r.lat, now.Sub(at.(time.Time)))

	}
	return nil, nil
}

func (r *latencyRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lat)
}

// paceDelayed schedules rate tasks a second through c for d + lead, in a batch every tick, each
// task due lead after its planned schedule time: the due times are spread evenly, rate a second.
// Only the tasks due while the stream still flows, those scheduled in the first d, are recorded
// in r: the load is steady for every one of them. It returns how many were recorded and how far
// behind plan the sends fell at worst.
func paceDelayed(ctx context.Context, c *client.Client, r *latencyRecorder, prefix string, rate float64, d, lead time.Duration) (int, time.Duration, error) {
	// A request every 10 ms, or every task's worth of time when that is longer.
	perTick := max(1, int(rate/100+0.5))
	tick := time.Duration(float64(perTick) / rate * float64(time.Second))
	spacing := tick / time.Duration(perTick)
	start := time.Now()
	var lag time.Duration
	n, recorded := 0, 0
	for k := range int((d + lead) / tick) {
		planned := start.Add(time.Duration(k) * tick)
		if w := time.Until(planned); w > 0 {
			time.Sleep(w)
		}
		lag = max(lag, time.Since(planned))
		reqs := make([]client.ScheduleRequest, perTick)
		for j := range reqs {
			id := prefix + strconv.Itoa(n)
			at := planned.Add(lead + time.Duration(j)*spacing).UTC()
			if planned.Sub(start) < d {
				r.runAt.Store(id, at)
				recorded++
			}
			reqs[j] = client.ScheduleRequest{ID: id, RunAt: at.Format(time.RFC3339Nano)}
			n++
		}
		if _, _, err := c.ScheduleBatch(ctx, lambdaName, reqs); err != nil {
			return recorded, lag, fmt.Errorf("schedule: %w", err)
		}
	}
	return recorded, lag, nil
}

// measureLatency paces delayed tasks into a running stack and waits for their first runs.
func measureLatency(ctx context.Context, c *client.Client, r *latencyRecorder, backend, prefix string, rate float64, d, lead, drain time.Duration) (LatencyRun, error) {
	n, lag, err := paceDelayed(ctx, c, r, prefix, rate, d, lead)
	if err != nil {
		return LatencyRun{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, lead+drain)
	defer cancel()
	_ = waitUntil(wctx, 20*time.Millisecond, func() (bool, error) { return r.count() >= n, nil }) // what arrived is counted below
	r.mu.Lock()
	lat := Summarise(r.lat)
	r.mu.Unlock()
	return LatencyRun{
		Rate: rate, Seconds: d.Seconds(), LeadMS: ms(lead), MaxLagMS: ms(lag), Missing: n - lat.Count,
		Latency: lat, Backend: backend,
	}, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// embeddedLatency measures delivery latency on the embedded stack.
func embeddedLatency(ctx context.Context, rate float64, d time.Duration, concurrency int) (LatencyRun, error) {
	r := &latencyRecorder{}
	e, err := startEmbedded(ctx, concurrency, r.handle)
	if err != nil {
		return LatencyRun{}, err
	}
	defer e.stop()
	return measureLatency(ctx, e.client, r, "embedded", "lat-", rate, d, time.Second, 60*time.Second)
}

// ScheduleRun is the schedule API's throughput.
type ScheduleRun struct {
	Requests     int     `json:"requests"`
	Clients      int     `json:"clients"`
	RequestsPerS float64 `json:"requests_per_s"`
	// BatchTasksPerS is tasks scheduled a second in batches of 100, from the same clients.
	BatchTasksPerS float64 `json:"batch_tasks_per_s"`
}

// scheduleThroughput measures single-task schedule requests a second against the embedded
// stack's HTTP API from clients goroutines, then tasks a second in batches. Tasks are due in an
// hour, so the workers stay idle and the API alone is measured.
func scheduleThroughput(ctx context.Context, requests, clients int) (ScheduleRun, error) {
	e, err := startEmbedded(ctx, 1, func(context.Context, worker.Task) (json.RawMessage, error) { return nil, nil })
	if err != nil {
		return ScheduleRun{}, err
	}
	defer e.stop()
	run := func(calls int, call func() error) (time.Duration, error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		start := time.Now()
		for range clients {
			wg.Go(func() {
				for next.Add(1) <= int64(calls) {
					if err := call(); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return time.Since(start), <-errs
	}
	single, err := run(requests, func() error {
		_, _, err := e.client.Schedule(ctx, lambdaName, client.ScheduleRequest{Delay: "1h"})
		return err
	})
	if err != nil {
		return ScheduleRun{}, err
	}
	batches := max(1, requests/batchSize)
	reqs := make([]client.ScheduleRequest, batchSize)
	for i := range reqs {
		reqs[i].Delay = "1h"
	}
	batched, err := run(batches, func() error {
		_, _, err := e.client.ScheduleBatch(ctx, lambdaName, reqs)
		return err
	})
	if err != nil {
		return ScheduleRun{}, err
	}
	return ScheduleRun{
		Requests: requests, Clients: clients, RequestsPerS: float64(requests) / single.Seconds(),
		BatchTasksPerS: float64(batches*batchSize) / batched.Seconds(),
	}, nil
}
