package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
// with another's handler; a handler no entry runs is not a lambda.
func TestRegistryLambdas(t *testing.T) {
	reg, err := registry.Parse([]byte(`{"lambdas": [
		{"name": "work", "priorities": ["urgent", "later"], "timeout": "42s", "concurrency": 3, "max_attempts": 7},
		{"name": "work-too", "handler": "work", "kind": "ecs", "timeout": "1m"}
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
	if len(got) != 2 {
		t.Errorf("lambdas %v: want work and work-too only", got)
	}
}

// lockedBuffer is a log that the stack's goroutines may write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// scripts writes executable shell scripts, name to body, into a new handlers folder.
func scripts(t *testing.T, bodies map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range bodies {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRegistryServesItsLambdasOnly: given a registry, the stack serves its entries alone, as the
// stacks deploy them: an executable of the handlers folder without an entry is not a lambda
// (scheduling it is refused as for any unknown lambda), and a warning at start names it; an
// entry runs its handler, another lambda's included.
func TestRegistryServesItsLambdasOnly(t *testing.T) {
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "work"}, {"name": "work-too", "handler": "work"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	dir := scripts(t, map[string]string{"work.sh": "cat", "extra": "cat"})
	var logs lockedBuffer
	s, err := local.Start(context.Background(), local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), HandlersDir: dir, Registry: reg,
		Task: task.Config{PollInterval: 50 * time.Millisecond}, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	c := &client.Client{Endpoint: "http://" + s.Addr()}
	ctx := context.Background()

	var apiErr *client.Error
	if _, _, err := c.Schedule(ctx, "extra", client.ScheduleRequest{ID: "x"}); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Errorf("scheduling extra, an executable without an entry: %v; want it refused as unknown (404)", err)
	}
	warned := false
	for line := range strings.Lines(logs.String()) {
		var rec struct {
			Level    string
			Handlers []string
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "WARN" && slices.Equal(rec.Handlers, []string{"extra"}) {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning at start naming extra alone:\n%s", logs.String())
	}
	if _, _, err := c.Schedule(ctx, "work-too", client.ScheduleRequest{ID: "w", Payload: json.RawMessage(`{"ran":true}`)}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetWait(ctx, "work-too", "w", 20*time.Second); err != nil || got.Status != task.StatusSuccess || string(got.Result) != `{"ran":true}` {
		t.Errorf("work-too: %s with %s, %v; want success with its payload, run by work.sh", got.Status, got.Result, err)
	}
}

// TestRegistryEntryWithoutHandler: an entry of the registry whose handler is not in the handlers
// folder fails the start, naming the entry, its handler and the folder.
func TestRegistryEntryWithoutHandler(t *testing.T) {
	reg, err := registry.Parse([]byte(`{"lambdas": [{"name": "work"}, {"name": "late", "handler": "absent"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	dir := scripts(t, map[string]string{"work": "cat"})
	s, err := local.Start(context.Background(), local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), HandlersDir: dir, Registry: reg,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err == nil {
		s.Stop(context.Background())
		t.Fatal("the stack started without a handler for lambda late")
	}
	for _, want := range []string{`"late"`, `"absent"`, dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// TestRegistryProgram: an entry's program (its path relative to the registry's folder) is its
// lambda's handler, whatever the handlers folder holds; a program that is missing fails the start.
func TestRegistryProgram(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "programs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "programs", "count.sh"), []byte("#!/bin/sh\nwc -c\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	load := func(js string) *registry.Registry {
		t.Helper()
		path := filepath.Join(dir, "lambdas.json")
		if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
		reg, err := registry.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	cfg := local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), HandlersDir: scripts(t, map[string]string{"count": "exit 1"}),
		Task: task.Config{PollInterval: 50 * time.Millisecond}, Logger: slog.New(slog.DiscardHandler),
		Registry: load(`{"lambdas": [{"name": "count", "kind": "ecs", "program": "programs/count.sh"}]}`),
	}
	s, err := local.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{Endpoint: "http://" + s.Addr()}
	if _, _, err := c.Schedule(context.Background(), "count", client.ScheduleRequest{ID: "c", Payload: json.RawMessage(`"four"`)}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetWait(context.Background(), "count", "c", 20*time.Second)
	s.Stop(context.Background())
	if err != nil || got.Status != task.StatusSuccess || string(got.Result) != "6" {
		t.Errorf("count: %s with %s (error %q), %v; want success with 6, the bytes of \"four\", counted by programs/count.sh", got.Status, got.Result, got.Error, err)
	}

	cfg.Registry = load(`{"lambdas": [{"name": "count", "kind": "ecs", "program": "programs/missing.sh"}]}`)
	if s, err := local.Start(context.Background(), cfg); err == nil {
		s.Stop(context.Background())
		t.Fatal("the stack started without the program of lambda count")
	} else if !strings.Contains(err.Error(), `"count"`) || !strings.Contains(err.Error(), filepath.Join(dir, "programs", "missing.sh")) {
		t.Errorf("error %q does not name the lambda and its program's path", err)
	}
}
