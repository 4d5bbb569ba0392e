package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/worker"
)

// TestKeyFairness is issue 32's acceptance on atf dev: on a lambda with concurrency 2, 600 tasks
// of key noisy and then one task each of keys q0 … q9; every q task finishes before a third of
// the noisy ones has. The noisy tasks hold their slots until every q task is in the queue, so
// the order in which the queue serves them decides, not how fast the sweep came to them.
func TestKeyFairness(t *testing.T) {
	ctx := t.Context()
	release := make(chan struct{})
	var mu sync.Mutex
	var finished []string // the keys of the tasks, in the order they finished
	mux := worker.NewMux()
	mux.Handle("work", worker.HandlerFunc(func(ctx context.Context, tk worker.Task) (json.RawMessage, error) {
		var p struct{ Key string }
		if err := json.Unmarshal(tk.Payload, &p); err != nil {
			return nil, err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		mu.Lock()
		finished = append(finished, p.Key)
		mu.Unlock()
		return nil, nil
	}))
	s, err := local.Start(context.Background(), local.Config{
		Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), Mux: mux, Concurrency: 2,
		Task:   task.Config{PollInterval: 50 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	c := &client.Client{Endpoint: "http://" + s.Addr()}

	keyed := func(key, id string) client.ScheduleRequest {
		return client.ScheduleRequest{ID: id, Key: key, Payload: json.RawMessage(fmt.Sprintf(`{"key":%q}`, key))}
	}
	const noisy = 600
	for b := range noisy / 100 {
		var reqs []client.ScheduleRequest
		for i := range 100 {
			reqs = append(reqs, keyed("noisy", fmt.Sprint("noisy-", b*100+i)))
		}
		if _, _, err := c.ScheduleBatch(ctx, "work", reqs); err != nil {
			t.Fatal(err)
		}
	}
	var quiet []client.ScheduleRequest
	for i := range 10 {
		quiet = append(quiet, keyed(fmt.Sprint("q", i), fmt.Sprint("q-", i)))
	}
	tasks, _, err := c.ScheduleBatch(ctx, "work", quiet)
	if err != nil {
		t.Fatal(err)
	}
	for i, tk := range tasks {
		if tk.Key != quiet[i].Key {
			t.Fatalf("task %s answered with key %q, want %q", tk.ID, tk.Key, quiet[i].Key)
		}
	}
	// Every q task is in the queue, behind most of the noisy ones, before a slot frees.
	for _, tk := range tasks {
		for {
			got, err := c.Get(ctx, "work", tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != task.StatusNew {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	close(release)
	for _, tk := range tasks {
		if got, err := c.Wait(ctx, "work", tk.ID); err != nil || got.Status != task.StatusSuccess {
			t.Fatalf("task %s: %s, %v", tk.ID, got.Status, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	last := 0
	for i, k := range finished {
		if k != "noisy" {
			last = i
		}
	}
	before := last - 9 // the tasks before the last q task, but the other nine q tasks
	if before >= noisy/3 {
		t.Fatalf("%d noisy tasks finished before the last q task, want fewer than %d", before, noisy/3)
	}
	t.Logf("%d noisy tasks finished before the last q task", before)
}
