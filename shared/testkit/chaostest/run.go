package chaostest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/history"
)

// Timing is the task lifecycle of the scenarios, short so that what a fault loses comes back
// within seconds. On AWS each heartbeat is two requests to the emulators, so they are rarer.
func Timing(aws bool) task.Config {
	c := task.Config{
		PollInterval: 50 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		HeartbeatTimeout: 600 * time.Millisecond, LeaseMargin: 200 * time.Millisecond,
		EnqueueTimeout: 5 * time.Second, BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		MaxAttempts: task.MaxAttemptsLimit,
	}
	if aws {
		c.PollInterval, c.HeartbeatInterval = 200*time.Millisecond, 250*time.Millisecond
		c.HeartbeatTimeout, c.LeaseMargin = 1500*time.Millisecond, 500*time.Millisecond
		c.EnqueueTimeout = 10 * time.Second
	}
	return c
}

// Start starts a local stack, stopped when the test ends, and returns a client of its API.
func Start(t testing.TB, c local.Config) *client.Client {
	t.Helper()
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := local.Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	return &client.Client{Endpoint: "http://" + s.Addr()}
}

// ScheduleAll schedules n tasks of lambda, with ids prefix-00000 and on, from 8 clients at once.
// A request that fails is sent again: the API answers a replay with the task it made.
func ScheduleAll(t testing.TB, c *client.Client, lambda, prefix string, n int, req client.ScheduleRequest) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				r := req
				r.ID = fmt.Sprintf("%s-%05d", prefix, i)
				ids[i] = r.ID
				var err error
				for try := 0; try < 20; try++ {
					if _, _, err = c.Schedule(context.Background(), lambda, r); err == nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				if err != nil {
					t.Errorf("schedule %s: %v", r.ID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return ids
}

// Wait lists lambda's tasks every 100 ms (or less often, if listing takes long) until all n are terminal, or timeout passes. It returns
// every listing, for history.Check, and the last. A listing that fails (as under injected
// faults) is tried again.
func Wait(t testing.TB, c *client.Client, lambda string, n int, timeout time.Duration) (observed [][]history.Final, last []history.Final) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		began := time.Now()
		snapshot, err := List(c, lambda)
		if err == nil {
			observed, last = append(observed, snapshot), snapshot
			if Done(snapshot, n) {
				return observed, last
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("tasks of %s still running after %s (last list error: %v)", lambda, timeout, err)
			return observed, last
		}
		time.Sleep(max(100*time.Millisecond, 2*time.Since(began))) // listing many tasks is work too
	}
}

// List lists every task of lambda.
func List(c *client.Client, lambda string) ([]history.Final, error) {
	var out []history.Final
	p := task.ListParams{Lambda: lambda, Limit: task.MaxListLimit}
	for {
		tasks, next, err := c.List(context.Background(), p)
		if err != nil {
			return nil, err
		}
		for _, tk := range tasks {
			out = append(out, history.Final{ID: tk.ID, Status: tk.Status, Attempts: tk.Attempts, MaxAttempts: tk.MaxAttempts})
		}
		if next == "" {
			return out, nil
		}
		p.Cursor = next
	}
}

// Done reports whether finals holds n tasks, all terminal.
func Done(finals []history.Final, n int) bool {
	return len(finals) == n && !slices.ContainsFunc(finals, func(f history.Final) bool { return !f.Status.Terminal() })
}

// Unfinished counts lambda's tasks that are not terminal, from the API's counts: cheaper than
// listing them all.
func Unfinished(c *client.Client, lambda string) (int, error) {
	ls, err := c.Lambdas(context.Background())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range ls {
		if l.Name != lambda {
			continue
		}
		for s, k := range l.Counts {
			if !s.Terminal() {
				n += k
			}
		}
	}
	return n, nil
}

// Report prints the scenario's summary line, as `make chaos` collects them, and fails the test
// on any violation.
func Report(t testing.TB, scenario string, r history.Report, extra string) {
	t.Helper()
	fmt.Printf("chaos %s: %s%s\n", scenario, r.Summary(), extra)
	if !r.OK() {
		t.Errorf("%s\nlost %v\noverlaps %v\nbackwards %v\nchanged %v\nover max %v", r.Summary(),
			head(r.Lost), head(r.Overlaps), head(r.Backwards), head(r.Changed), head(r.OverMax))
	}
}

func head(s []string) []string { return s[:min(len(s), 10)] }

// Log is a slog handler that keeps what a worker said about each task, for a test to read.
type Log struct {
	mu    sync.Mutex
	byID  map[string][]Line
	attrs []slog.Attr
	root  *Log
}

// Line is one record about a task: its message and its err attribute, if any.
type Line struct {
	Msg string
	Err error
}

// Said returns what was logged about task id.
func (l *Log) Said(id string) []Line {
	r := l.rootLog()
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Line(nil), r.byID[id]...)
}

func (l *Log) rootLog() *Log {
	if l.root != nil {
		return l.root
	}
	return l
}

func (l *Log) Enabled(context.Context, slog.Level) bool { return true }

func (l *Log) Handle(_ context.Context, rec slog.Record) error {
	id, line := "", Line{Msg: rec.Message}
	each := func(a slog.Attr) bool {
		switch a.Key {
		case "task_id":
			id = a.Value.String()
		case "err":
			line.Err, _ = a.Value.Any().(error)
		}
		return true
	}
	for _, a := range l.attrs {
		each(a)
	}
	rec.Attrs(each)
	if id == "" {
		return nil
	}
	r := l.rootLog()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string][]Line{}
	}
	r.byID[id] = append(r.byID[id], line)
	return nil
}

func (l *Log) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Log{attrs: append(append([]slog.Attr(nil), l.attrs...), attrs...), root: l.rootLog()}
}

func (l *Log) WithGroup(string) slog.Handler { return l }
