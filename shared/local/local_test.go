package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/registry"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

func start(t testing.TB, handler worker.HandlerFunc) (*client.Client, func()) {
	mux := worker.NewMux()
	mux.Handle("work", handler)
	s, err := local.Start(context.Background(), local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), Mux: mux, Concurrency: 8,
		Task:   task.Config{PollInterval: 50 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &client.Client{Endpoint: "http://" + s.Addr()}, func() { s.Stop(context.Background()) }
}

// TestGoHandlerInProcess: a Go handler registered on a Mux runs in the local stack.
func TestGoHandlerInProcess(t *testing.T) {
	c, stop := start(t, func(_ context.Context, tk worker.Task) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprintf(`{"attempt":%d}`, tk.Attempt)), nil
	})
	defer stop()
	tk, _, err := c.Schedule(context.Background(), "work", client.ScheduleRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		got, err := c.Get(context.Background(), "work", tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == task.StatusSuccess {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("task did not succeed")
}

// TestSecondProcessRefused: one atf dev owns a database.
func TestSecondProcessRefused(t *testing.T) {
	db := filepath.Join(t.TempDir(), "atf.db")
	mux := worker.NewMux()
	mux.HandleFunc("work", func(context.Context, worker.Task) (json.RawMessage, error) { return nil, nil })
	cfg := local.Config{Addr: "127.0.0.1:0", DBPath: db, Mux: mux, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s, err := local.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	if _, err := local.Start(context.Background(), cfg); err == nil {
		t.Fatal("a second stack opened the same database")
	}
}

// BenchmarkLifecycle measures tasks scheduled over HTTP and run to success by an in-process Go
// handler, end to end on the embedded store.
func BenchmarkLifecycle(b *testing.B) {
	var done atomic.Int64
	c, stop := start(b, func(context.Context, worker.Task) (json.RawMessage, error) {
		done.Add(1)
		return nil, nil
	})
	defer stop()
	b.ResetTimer()
	for range b.N {
		if _, _, err := c.Schedule(context.Background(), "work", client.ScheduleRequest{}); err != nil {
			b.Fatal(err)
		}
	}
	for done.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// TestRegistryLambdas: the registry sets a declared lambda's settings, and may run one lambda
// with another's handler; other handlers keep the defaults.
func TestRegistryLambdas(t *testing.T) {
	reg, err := registry.Parse([]byte(`{"lambdas": [
		{"name": "work", "priorities": ["urgent", "later"], "timeout": "42s", "concurrency": 3, "max_attempts": 7},
		{"name": "work-too", "handler": "work", "kind": "ecs", "timeout": "1m"},
		{"name": "absent", "timeout": "1m"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	mux := worker.NewMux()
	noop := func(context.Context, worker.Task) (json.RawMessage, error) { return nil, nil }
	mux.HandleFunc("work", noop)
	mux.HandleFunc("plain", noop)
	lambdas, err := local.Config{Mux: mux, Registry: reg, Concurrency: 2}.Lambdas()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]task.Lambda{}
	for _, l := range lambdas {
		got[l.Name] = l
	}
	if w := got["work"]; fmt.Sprint(w.Priorities) != "[urgent later]" || w.Timeout != 42*time.Second || w.Concurrency != 3 || w.MaxAttempts != 7 {
		t.Errorf("work: %+v, want the registry's settings", w)
	}
	if w, ok := got["work-too"]; !ok || w.Timeout != time.Minute {
		t.Errorf("work-too: %+v, %v; want it to run work's handler with its own timeout", w, ok)
	}
	if p := got["plain"]; p.Concurrency != 2 || p.Timeout != task.DefaultHandlerTimeout {
		t.Errorf("plain: %+v, want the defaults", p)
	}
	if _, ok := got["absent"]; ok || len(got) != 3 {
		t.Errorf("lambdas %v: want work, work-too and plain only", got)
	}
}
