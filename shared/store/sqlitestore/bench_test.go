package sqlitestore

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/store/storetest"
	"github.com/openatf/atf/shared/task"
)

// BenchmarkStore: claim and due sweep on the embedded store (make bench; benchstat compares runs).
func BenchmarkStore(b *testing.B) {
	storetest.Benchmark(b, func(b *testing.B) task.Store {
		s, err := Open(filepath.Join(b.TempDir(), "atf.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

// BenchmarkDueBacklog: the consumer's due queries on a lambda with a backlog of 100,000 waiting
// tasks of its default priority, all due, and a few running ones not yet due: the timeout sweep
// (Running), a sweep of the backlog's priority up to the quota (Backlog) and of another priority
// (Other). Each reads at most its limit of tasks, however long the backlog.
func BenchmarkDueBacklog(b *testing.B) {
	ctx := b.Context()
	s, err := Open(filepath.Join(b.TempDir(), "atf.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	l := task.Lambda{Name: "backlog"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	const backlog, running = 100_000, 100
	for i := 0; i < backlog+running; i += task.MaxBatch {
		batch := make([]task.Task, task.MaxBatch)
		for j := range batch {
			t, err := task.New(task.Spec{ID: fmt.Sprintf("t%07d", i+j)}, l, now.Add(-time.Hour), cfg)
			if err == nil && i >= backlog {
				if t, err = task.Enqueue(t, now, cfg); err == nil {
					t, err = task.Claim(t, task.NewLease(), now, cfg)
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			batch[j] = t
		}
		if err := s.CreateBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	ready := []task.Status{task.StatusNew, task.StatusRetriableFailure, task.StatusEnqueued}
	for _, c := range []struct {
		name string
		p    task.DueParams
		want int
	}{
		{"Running", task.DueParams{Statuses: task.Running}, 0},
		{"Backlog", task.DueParams{Statuses: ready, Priority: l.DefaultPriority()}, cfg.EnqueueQuota},
		{"Other", task.DueParams{Statuses: ready, Priority: l.Priorities[0]}, 0},
	} {
		c.p.Lambda, c.p.Before, c.p.Limit = l.Name, now, cfg.EnqueueQuota
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				due, err := s.Due(ctx, c.p)
				if err != nil {
					b.Fatal(err)
				}
				if len(due) != c.want {
					b.Fatalf("%d due, want %d", len(due), c.want)
				}
			}
		})
	}
}

// BenchmarkPrunePass: one pass of the pruning job, DefaultPruneBatch expired finished tasks
// deleted in one transaction (make bench): how long it holds the writer.
func BenchmarkPrunePass(b *testing.B) {
	ctx := b.Context()
	s, err := Open(filepath.Join(b.TempDir(), "atf.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ended := time.Now().Add(-48 * time.Hour).UTC()
	fill := func(from int) {
		for i := 0; i < DefaultPruneBatch; i += task.MaxBatch {
			batch := make([]task.Task, task.MaxBatch)
			for j := range batch {
				batch[j] = task.Task{Lambda: "prune", ID: fmt.Sprintf("t%09d", from+i+j), Priority: "default", Status: task.StatusSuccess,
					MaxAttempts: 3, RunAt: ended, CreatedAt: ended, UpdatedAt: ended, Version: 4, Spec: "spec", Payload: []byte(`{"n":1}`)}
			}
			if err := s.CreateBatch(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	next := 0
	for b.Loop() {
		b.StopTimer()
		fill(next)
		next += DefaultPruneBatch
		b.StartTimer()
		if n, err := s.Prune(ctx, time.Now().Add(-24*time.Hour), DefaultPruneBatch); err != nil || n != DefaultPruneBatch {
			b.Fatalf("pruned %d (%v), want %d", n, err, DefaultPruneBatch)
		}
	}
}
