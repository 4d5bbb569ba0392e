package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// TestMetricsAfterARun: after an end-to-end run, GET /metrics shows that run's counts: tasks by
// status, transitions and lifecycle events, one delivery latency per task, handler runs by
// outcome, the consumer's passes, and the queues.
func TestMetricsAfterARun(t *testing.T) {
	const token = "metrics-test-token"
	const ok, bad, flaky = 5, 2, 3
	mux := worker.NewMux()
	mux.HandleFunc("ok", func(context.Context, worker.Task) (json.RawMessage, error) { return json.RawMessage(`{}`), nil })
	mux.HandleFunc("bad", func(context.Context, worker.Task) (json.RawMessage, error) {
		return nil, worker.Fatal(errors.New("bad input"))
	})
	mux.HandleFunc("flaky", func(_ context.Context, tk worker.Task) (json.RawMessage, error) {
		if tk.Attempt == 1 {
			return nil, errors.New("try again") // retriable
		}
		return json.RawMessage(`{}`), nil
	})
	s, err := local.Start(context.Background(), local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), Mux: mux, Token: token,
		Task:   task.Config{PollInterval: 50 * time.Millisecond, BackoffBase: 50 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	c := &client.Client{Endpoint: "http://" + s.Addr(), Token: token}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids [][2]string
	for lambda, n := range map[string]int{"ok": ok, "bad": bad, "flaky": flaky} {
		for range n {
			tk, _, err := c.Schedule(ctx, lambda, client.ScheduleRequest{})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, [2]string{lambda, tk.ID})
		}
	}
	for _, id := range ids {
		if _, err := c.Wait(ctx, id[0], id[1]); err != nil {
			t.Fatalf("%s/%s: %v", id[0], id[1], err)
		}
	}

	// The token guards /metrics as it guards the API.
	if code := get(t, "http://"+s.Addr()+"/metrics", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the token: %d, want 401", code)
	}
	families := scrape(t, "http://"+s.Addr()+"/metrics", token)

	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"atf_tasks", map[string]string{"lambda": "ok", "status": "success"}, ok},
		{"atf_tasks", map[string]string{"lambda": "ok", "status": "enqueued"}, 0},
		{"atf_tasks", map[string]string{"lambda": "bad", "status": "fatal_failure"}, bad},
		{"atf_tasks", map[string]string{"lambda": "flaky", "status": "success"}, flaky},
		// Created: from is empty, whichever status a task is created in.
		{"atf_task_transitions_total", map[string]string{"lambda": "ok", "from": ""}, ok},
		{"atf_task_transitions_total", map[string]string{"lambda": "ok", "from": "enqueued", "to": "processing"}, ok},
		{"atf_task_transitions_total", map[string]string{"lambda": "ok", "from": "processing", "to": "success"}, ok},
		{"atf_task_transitions_total", map[string]string{"lambda": "bad", "from": "processing", "to": "fatal_failure"}, bad},
		{"atf_task_transitions_total", map[string]string{"lambda": "flaky", "from": "enqueued", "to": "processing"}, 2 * flaky},
		{"atf_task_events_total", map[string]string{"lambda": "ok", "event": "scheduled"}, ok},
		{"atf_task_events_total", map[string]string{"lambda": "ok", "event": "started"}, ok},
		{"atf_task_events_total", map[string]string{"lambda": "ok", "event": "succeeded"}, ok},
		{"atf_task_events_total", map[string]string{"lambda": "bad", "event": "failed"}, bad},
		{"atf_task_events_total", map[string]string{"lambda": "flaky", "event": "retried"}, flaky},
		{"atf_task_events_total", map[string]string{"lambda": "flaky", "event": "succeeded"}, flaky},
		// One delivery latency per task: its first attempt's.
		{"atf_delivery_latency_seconds", map[string]string{"lambda": "ok"}, ok},
		{"atf_delivery_latency_seconds", map[string]string{"lambda": "flaky"}, flaky},
		{"atf_handler_duration_seconds", map[string]string{"lambda": "ok", "outcome": "success"}, ok},
		{"atf_handler_duration_seconds", map[string]string{"lambda": "bad", "outcome": "fatal"}, bad},
		{"atf_handler_duration_seconds", map[string]string{"lambda": "flaky", "outcome": "retriable"}, flaky},
		{"atf_handler_duration_seconds", map[string]string{"lambda": "flaky", "outcome": "success"}, flaky},
		{"atf_store_errors_total", nil, 0},
	}
	for _, w := range want {
		if got := sum(families[w.name], w.labels); got != w.value {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.value)
		}
	}
	// What happens on its own schedule: the consumer's passes, the queues of what ran.
	if n := sum(families["atf_sweep_duration_seconds"], map[string]string{"lambda": "ok"}); n < 1 {
		t.Errorf("atf_sweep_duration_seconds{lambda=ok} counts %v passes, want some", n)
	}
	if families["atf_queue_messages"] == nil || len(find(families["atf_queue_messages"], map[string]string{"lambda": "ok", "priority": "normal", "state": "visible"})) != 1 {
		t.Errorf("no atf_queue_messages of lambda ok's normal queue")
	}
}

// get GETs url with the bearer token, if any, and returns the status code; the body goes to out.
func get(t *testing.T, url, token string, out *[]byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		*out = body
	}
	return resp.StatusCode
}

// scrape reads the metrics at url, in Prometheus's text format.
func scrape(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	var body []byte
	if code := get(t, url, token, &body); code != http.StatusOK {
		t.Fatalf("GET %s: %d: %s", url, code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse the metrics: %v\n%s", err, body)
	}
	return families
}

// find returns the metrics of f whose labels include labels.
func find(f *dto.MetricFamily, labels map[string]string) []*dto.Metric {
	if f == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			if have[k] != v { // an absent label reads as "", as in PromQL
				match = false
			}
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

// sum adds the values (counters, gauges) or the sample counts (histograms) of f's metrics whose
// labels include labels.
func sum(f *dto.MetricFamily, labels map[string]string) float64 {
	var total float64
	for _, m := range find(f, labels) {
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}
